"""Optional compiled kernels: a C function of an extension module that setup.py builds beside its numpy twin
(``optional=True``: where it does not compile, the package installs without it and the numpy code runs)."""
from __future__ import annotations

import ctypes
import importlib.util
import os


def kernel_function(module: str, name: str, argtypes, restype=ctypes.c_int):
    """The C function ``name`` of the built extension ``module`` (through ctypes, which releases the GIL while it
    runs) with its ``argtypes`` and ``restype``, or None where the extension was not built or does not load."""
    try:
        spec = importlib.util.find_spec(module)
        if spec is None or not spec.origin:
            return None
        fn = getattr(ctypes.CDLL(spec.origin), name)
    except (OSError, AttributeError, ImportError):
        return None
    fn.restype, fn.argtypes = restype, list(argtypes)
    return fn


def numpy_forced(variable: str) -> bool:
    """Whether the environment ``variable`` asks for the numpy code instead of a compiled kernel (``=numpy``)."""
    return os.environ.get(variable, "").strip().lower() == "numpy"
