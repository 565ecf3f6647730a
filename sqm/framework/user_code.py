"""A party's own code: a Python file on the party's own disk and the function in it that builds the party's model
(a PBM-VFL job's ``"model": "file.py:factory"``, or its operator's ``--model FILE:FACTORY``).

The file is executed in the party's own process, by the party's own choice, like any script its operator runs:
it never travels to another party, and nothing a peer sends is ever executed (a job file names a file in its own
folder only, :func:`sqm.framework.spec.load_job`).  Written by hand because the standard library's
``importlib.util.spec_from_file_location`` is the whole mechanism; this module only names the file and the party
in every error.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import sys

from sqm.errors import UsageError


def split_spec(spec: str, where: str = "model code") -> tuple[str, str]:
    """``"path.py:factory"`` -> (path, factory); a UsageError starting with ``where`` unless the factory is a
    Python name."""
    if not isinstance(spec, str) or ":" not in spec or not spec.rsplit(":", 1)[1].isidentifier():
        raise UsageError(f"{where} must be \"file.py:factory\" (a Python file and the name of the function in it "
                         f"that builds the party's torch model), got {spec!r}")
    path, name = spec.rsplit(":", 1)
    return path, name


def load_factory(spec: str, who: str):
    """The function ``factory`` of the Python file in ``spec`` (``"path.py:factory"``), the file executed as a
    module of its own (registered in ``sys.modules``, so that torch can save and copy what it defines).  Errors
    name ``who`` (e.g. "client 2") and the file: a missing file, one that fails to run, no such function."""
    path, name = split_spec(spec)
    if not os.path.isfile(path):
        raise UsageError(f"{who}: its model file {path} does not exist")
    modname = "sqm_party_code_" + hashlib.sha256(os.path.abspath(path).encode()).hexdigest()[:16]
    module = sys.modules.get(modname)
    if module is None:
        loader = importlib.util.spec_from_file_location(modname, path)
        if loader is None or loader.loader is None:
            raise UsageError(f"{who}: its model file {path} is not a Python file")
        module = importlib.util.module_from_spec(loader)
        sys.modules[modname] = module
        try:
            loader.loader.exec_module(module)
        except Exception as e:
            del sys.modules[modname]
            raise UsageError(f"{who}: its model file {path} failed to run: {type(e).__name__}: {e}") from e
    factory = getattr(module, name, None)
    if not callable(factory):
        raise UsageError(f"{who}: its model file {path} defines no function {name!r}")
    return factory
