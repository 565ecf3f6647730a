"""The one JSON output of every ``sqm`` command (``--json FILE``), schema version 1.

Every command builds its file with :func:`document` and writes it with :func:`write`: the same top-level keys
for every command and, for one command, in local and job mode (``sqm/cli/output.schema.json``, JSON Schema
draft 2020-12, shipped in the package; :func:`schema` loads it)::

    {"schema_version": "1", "command": "pca", "mode": "local" | "job" | "bench" | "ledger",
     "sqm_version": ..., "simulation": true | false | null, "secure_mode": ..., "dataset": ...,
     "parameters": {...}, "privacy": [PrivacyReport.as_dict(), ...], "results": [{"method": ..., ...}],
     "timings": {"total": seconds, ...}, "bytes": {"total": int | null, "per_party": [...]},
     optional: "columns", "released", "warnings", "clients", "ledger", "job", "details"}

The file is strict JSON (:func:`sqm.mechanism.report.to_json`, ``allow_nan=False``): a non-finite number is written as
the string "inf", "-inf" or "nan" (an epsilon "inf" means no privacy guarantee); numpy values become plain
numbers and lists.
"""
from __future__ import annotations

import json
from typing import Any
from collections.abc import Iterable

from sqm.errors import UsageError

SCHEMA_VERSION = "1"
SCHEMA_FILE = "output.schema.json"
OPTIONAL = ("columns", "released", "warnings", "clients", "ledger", "alignment", "job", "details")
MODES = ("local", "job", "bench", "ledger")
# argparse destinations that are not parameters of the run (dispatch and output options)
NOT_PARAMETERS = {"func", "command", "budget_command", "json", "quiet", "plot", "argv",
                  "task_params"}  # argv, task_params: the command line, the task's options (sqm.cli.command.parse)


def schema() -> dict:
    """The output schema (``sqm/cli/output.schema.json``, shipped as package data)."""
    from importlib import resources

    return json.loads(resources.files("sqm.cli").joinpath(SCHEMA_FILE).read_text())


def command_name(args) -> str:
    """The subcommand that runs: ``"pca"``, ``"budget show"``...  (``args.command``, then ``args.budget_command``
    when given; for a parser built without that destination, the application package of ``args.func``: ``hdp-vfl``.)"""
    sub = getattr(args, "budget_command", None)
    name = getattr(args, "command", None) or args.func.__module__.split(".")[1].replace("_", "-")
    return f"{name} {sub}" if sub else str(name)


def parameters(args, **resolved) -> dict:
    """The run's options (``args``, less dispatch and output options), with ``resolved`` values (defaults
    the command chose, e.g. a dataset's sampling rate) in place of the given ones."""
    out = {k: v for k, v in vars(args).items() if k not in NOT_PARAMETERS and not callable(v)
           and not k.startswith(("verbose", "quiet"))}  # -v/-q: sqm.cli.options.add_verbosity's dests
    out.update(resolved)
    return out


def byte_counts(per_party: Iterable | None = None, total: int | None = None) -> dict:
    """``{"total", "per_party"}``: bytes each party sent (index 0 the server; None: not measured here) and
    their sum (None when any is unmeasured, unless given)."""
    per = [None if b is None else int(b) for b in (per_party or [])]
    measured = [b for b in per if b is not None]
    if total is None and per and len(measured) == len(per):
        total = sum(measured)
    return {"total": None if total is None else int(total), "per_party": per}


def document(command: str, mode: str, *, parameters: dict, results: Iterable[dict], privacy: Iterable = (),
             timings: dict | None = None, bytes: dict | None = None, simulation: bool | None = None,
             secure_mode: bool | None = None, dataset: str | None = None, **optional: Any) -> dict:
    """One output document (see the module docstring); ``privacy``: :class:`sqm.mechanism.report.PrivacyReport` objects
    or their dicts; ``optional``: only the keys of :data:`OPTIONAL` (None values are left out)."""
    if mode not in MODES:
        raise UsageError(f"unknown output mode {mode!r}; modes: {MODES}")
    unknown = sorted(set(optional) - set(OPTIONAL))
    if unknown:
        raise UsageError(f"output keys {unknown} are not in schema version {SCHEMA_VERSION}; optional keys: "
                         f"{OPTIONAL}")
    from sqm import __version__  # importlib.metadata: paid when a document is written, not by sqm --help

    doc = {"schema_version": SCHEMA_VERSION, "command": command, "mode": mode, "sqm_version": __version__,
           "simulation": simulation, "secure_mode": secure_mode, "dataset": dataset,
           "parameters": dict(parameters), "privacy": [getattr(p, "as_dict", lambda p=p: p)() for p in privacy],
           "results": [dict(r) for r in results], "timings": dict(timings or {}),
           "bytes": bytes if bytes is not None else byte_counts()}
    doc.update({k: v for k, v in optional.items() if v is not None})
    return doc


def write(path: str, doc: dict, indent: int | None = 2) -> None:
    """Write ``doc`` (:func:`document`) to ``path`` as strict JSON (:func:`sqm.mechanism.report.write_json`)."""
    from sqm.mechanism.report import write_json

    if doc.get("schema_version") != SCHEMA_VERSION:
        raise UsageError("sqm.cli.output.write takes a document built by sqm.cli.output.document")
    write_json(path, doc, indent)
