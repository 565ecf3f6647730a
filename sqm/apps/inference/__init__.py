"""Private inference with a released model on records whose features are split across the clients.

:mod:`.model` reads a released model (a training job's ``--json``) as weights by raw column; :mod:`.job` the task
of a scoring job (:class:`ScoringJobTask`): each client scores its own columns of each record, the partial
scores are summed on secret shares, and only the requesting party learns the scores.
"""
import importlib

_LAZY = {"ReleasedModel": "model", "load_model": "model", "ScoringJobTask": "job"}

__all__ = list(_LAZY)


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
