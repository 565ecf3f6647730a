"""The one privacy-report type for every method, and its JSON form.

:class:`PrivacyReport` describes what one method releases: SQM (server- and client-observed epsilon, mu,
sensitivities, gamma), central or local DP (sigma), PBM, HDP-VFL, or no privacy (``epsilon_server=inf``).
``events`` holds the releases as :mod:`sqm.mechanism.events` (dp-accounting ``DpEvent``s), which the privacy-budget
ledger (:mod:`sqm.mechanism.ledger`) composes across jobs.

:func:`jsonable` / :func:`to_json` turn reports, numpy values and events into JSON (non-finite floats as the
strings ``"inf"``, ``"-inf"``, ``"nan"``, so the file is strict JSON).  Printing them is the face's
(:mod:`sqm.cli.tables`).
"""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from collections.abc import Sequence
from typing import Any

import numpy as np
from sqm.errors import UsageError


ZERO_OUT = "zero-out"
NEIGHBOURING = {
    ZERO_OUT: ("zero-out: the neighbouring data set replaces one record's values by zeros (every value the record "
               "contributes, the intercept's constant included: it then adds nothing to any released sum); the "
               "record stays in the aligned set, so the record count n, which is public and from which "
               "defaults are chosen, is the same in both"),
    "embedding": ("feature-level: the neighbouring release changes one client's embedding of one record (PBM-VFL's "
                  "unit, taking the embeddings as given; not a guarantee for the records' features)"),
    "none": "no privacy guarantee",
}
"""The neighbouring relations a report can name.  Every record-level guarantee of this project (SQM server- and
client-observed, every baseline) is under ONE of them, zero-out: with n public (the schedule and the record
alignment's count depend on it) add/remove-one is not what is protected, and replace-one is implied by
zero-out twice (group privacy).  PBM-VFL's feature-level epsilon is in another unit ("embedding")."""

RELATION_WORDS = {
    ZERO_OUT: "zero-out: a record replaced by a null record that contributes nothing, intercept constant included",
    "embedding": "embedding: one client's embedding of one record changed, not the record's features",
    "none": "no privacy guarantee",
    "sample": "sample-level: every client's embedding of one record changed, not the record's features",
}
"""Each relation of :data:`NEIGHBOURING` in a few words, for every line that prints an epsilon
(:func:`relation_phrase`): zero-out's null record is the one whose every contribution, to every released sum and
monomial, is zero (the intercept's public constant and a label's encoding included).  "sample" is no report's
relation: PBM-VFL prints its sample-level epsilon beside the report's feature-level ("embedding") one."""


def relation_phrase(neighbouring: str, against: str = "") -> str:
    """The words a printed epsilon carries for its relation ``neighbouring`` (a key of :data:`NEIGHBOURING`), with
    the observer it holds against when given (``against="the server"``): "zero-out: a record replaced by a null
    record ..., against the server".  The one place the face's epsilons get their relation's words."""
    if neighbouring not in RELATION_WORDS:
        raise UsageError(f"neighbouring must be one of {sorted(RELATION_WORDS)}, got {neighbouring!r}")
    words = RELATION_WORDS[neighbouring]
    return f"{words}, against {against}" if against and neighbouring != "none" else words


CONVERSIONS = {
    "gdp": ("Gaussian DP with the proven Skellam constant (sqm.mechanism.skellam_gdp), converted exactly; taken "
            "where it gives the smaller epsilon"),
    "pld": ("the privacy-loss distribution (dp-accounting, pessimistic) of the subsampled Gaussians that dominate "
            "Poisson-sampled Skellam releases (sqm.mechanism.events.dominating_gaussian); taken where smaller"),
    "rdp": "Renyi DP (SQM Lemma 2 / Eq. 20), converted by dp-accounting's rule",
    "": "not stated (a baseline: its notes say how it is calibrated)",
}
"""How an SQM report's server-observed epsilon was converted (``PrivacyReport.conversion``): both conversions
are sound for the same releases and the smaller epsilon is reported
(:func:`sqm.mechanism.conversion.tighter_epsilon`)."""


class DeferredEvents(Sequence):
    """A report's events, built on first use by ``build()`` (a picklable callable returning them): building
    dp-accounting events imports dp-accounting and SciPy (about a second of CPU), which a launcher need not
    load before its parties start, nor a party that only plans its release.  Compares equal to the tuple of the
    same events."""

    def __init__(self, build, as_json=None):
        self._build, self._events, self._as_json = build, None, as_json

    def to_json(self) -> list:
        """The events as :func:`sqm.mechanism.events.event_to_json` writes them; from ``as_json()`` (the same
        dicts, written without dp-accounting) while the events are not built."""
        if self._events is None and self._as_json is not None:
            return list(self._as_json())
        from .events import event_to_json

        return [event_to_json(e) for e in self]

    def _get(self) -> tuple:
        if self._events is None:
            self._events = tuple(self._build())
        return self._events

    def __getitem__(self, i):
        return self._get()[i]

    def __len__(self) -> int:
        return len(self._get())

    def __eq__(self, other) -> bool:
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    __hash__ = None  # type: ignore[assignment]  # equal to any equal sequence: unhashable, as a list

    def __repr__(self) -> str:
        return repr(self._get()) if self._events is not None else "DeferredEvents(not built yet)"


@dataclass(kw_only=True)
class PrivacyReport:
    """The privacy of one method's releases (all fields keyword-only).

    ``epsilon_server``: epsilon at ``delta`` against the party that sees the result (for a baseline without a
    server, against whoever sees its output); ``epsilon_client``: against a client that knows its own noise
    share (None where it does not apply, e.g. a single client).  ``events``: the releases as
    :mod:`sqm.mechanism.events`, for composition in the ledger; ``eta``: the probability of a failure event outside them
    (the ledger adds (1 + e^epsilon) eta to delta, :func:`sqm.mechanism.accounting.delta_with_failure`).  ``method``
    defaults to "SQM" so that :class:`sqm.mechanism.release.SQM` builds it with its own fields only.  ``neighbouring``:
    the relation every epsilon of the report is computed under (a key of :data:`NEIGHBOURING`; default zero-out, the
    record-level relation of every method here).  ``conversion``: for SQM, which conversion gave ``epsilon_server`` (a
    key of :data:`CONVERSIONS`)."""

    method: str = "SQM"
    epsilon_server: float
    delta: float
    epsilon_client: float | None = None
    mu: float | None = None
    sigma: float | None = None
    l2_sensitivity: float | None = None
    l1_sensitivity: float | None = None
    gamma: float | None = None
    scale: float | None = None
    n_parties: int | None = None
    sampling_rate: float = 1.0
    rounds: int = 1
    events: Sequence = field(default_factory=tuple)
    eta: float = 0.0  # a failure probability outside the events (e.g. a batch cap): adds (1 + e^eps) eta to delta
    notes: str = ""
    neighbouring: str = ZERO_OUT
    conversion: str = ""  # how SQM's epsilons were converted: "gdp", "pld" or "rdp" (CONVERSIONS); "" otherwise

    def __post_init__(self):
        if not isinstance(self.events, DeferredEvents):
            self.events = tuple(self.events)
        if self.conversion not in CONVERSIONS:
            raise UsageError(f"conversion must be one of {sorted(CONVERSIONS)}, got {self.conversion!r}")
        if self.neighbouring not in NEIGHBOURING:
            raise UsageError(f"neighbouring must be one of {sorted(NEIGHBOURING)}, got {self.neighbouring!r}")

    def as_dict(self) -> dict:
        """A JSON-able dict of every field (events as :func:`sqm.mechanism.events.event_to_json` dicts)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return jsonable(out)


def jsonable(obj: Any) -> Any:
    """``obj`` as plain JSON values: dataclasses (``as_dict`` when they have one) and mappings as dicts,
    sequences and numpy arrays as lists, numpy scalars as Python numbers, DpEvents through
    :func:`sqm.mechanism.events.event_to_json`, non-finite floats as ``"inf"`` / ``"-inf"`` / ``"nan"``.  A
    process that never imported dp-accounting holds no DpEvent: it is not imported here."""
    import sys

    dp_event = sys.modules.get("dp_accounting.dp_event")
    if isinstance(obj, DeferredEvents):
        return obj.to_json()
    if obj is None or isinstance(obj, (bool, str, int)) and not isinstance(obj, np.integer):
        return obj
    if isinstance(obj, (float, np.floating)):
        v = float(obj)
        return v if math.isfinite(v) else ("nan" if math.isnan(v) else ("inf" if v > 0 else "-inf"))
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    if dp_event is not None and isinstance(obj, dp_event.DpEvent):
        from .events import event_to_json

        return event_to_json(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        as_dict = getattr(obj, "as_dict", None)
        if callable(as_dict):
            return jsonable(as_dict())
        return {f.name: jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, np.ndarray):
        return jsonable(obj.tolist())
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in obj]
    raise TypeError(f"cannot write a {type(obj).__name__} as JSON: {obj!r}")


def to_json(obj: Any, path: str | None = None, indent: int | None = 2) -> str:
    """``obj`` (see :func:`jsonable`) as strict JSON text; written to ``path`` too when given."""
    text = json.dumps(jsonable(obj), indent=indent, allow_nan=False)
    if path is not None:
        with open(path, "w") as f:
            f.write(text + "\n")
    return text


def write_json(path: str, obj: Any, indent: int | None = 2) -> None:
    """Write ``obj`` to ``path`` as strict JSON (:func:`to_json`)."""
    to_json(obj, path, indent)
