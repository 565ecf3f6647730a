"""The record alignment's public policies, declared once, light to import (the command line's options read them):
the fewest records in common a job runs on, and a party's size policy for its peers' sets."""
from __future__ import annotations

import math

from sqm.errors import UsageError

DEFAULT_MIN_INTERSECTION = 100
# A peer's set may hold at most this many times this party's own (a party holding no set: the largest set at most
# this many times the smallest).  Why 10: organisations that align their records hold sets of comparable sizes
# (customers of a bank and of an insurer in one region), and within 10x every party's work stays bounded by its
# own (each client blinds every list: at most 1 + (n - 1) 10 times its own); a peer holding the whole id space
# against this party's sample is refused.  Each party sets its own (--max-set-ratio): it is not agreed.
DEFAULT_MAX_SET_RATIO = 10.0
# The PSI's keys (the job file's "alignment_keys", agreed): "threshold", as strong as the runtime's threshold t (with
# t = 1, one key the clients share: no party alone holds it and sees a list under it, as no party alone holds a
# secret of the sharing), or "all", every list under every client's key (a coalition of the server and all clients
# but one still cannot test an id), at n multiplications per id instead of one.
ALIGNMENT_KEYS = ("threshold", "all")
DEFAULT_ALIGNMENT_KEYS = "threshold"


def check_min_intersection(v, where: str = "--min-intersection") -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise UsageError(f"{where} must be an integer >= 1 (the fewest records in common a job runs on), got {v!r}")
    return v


def check_max_set_ratio(v, where: str = "--max-set-ratio") -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 1:
        raise UsageError(f"{where} must be a number >= 1 (how many times this party's own set a peer's set may "
                         f"hold), got {v!r}")
    return float(v)
