"""Exit codes of party processes (``python -m sqm.runtime.party``) and of the ``sqm`` command: one table.

==== ============ =================================================================================================
code name         meaning
==== ============ =================================================================================================
0    OK           the job finished; this party's result was released to it
1    ERROR        an unexpected error (a bug, an operating-system error); peers are told only its type
2    USAGE        bad command-line options, parameters or job file, found before any party process starts
                  (argparse's convention)
3    REFUSED      a party refused the job: the parties' configurations differ, a peer sent a malformed message,
                  the clients' records disagree (counts, ids), or another party aborted the job (its notice, e.g.
                  "client 2 refused: its file contains NaN or infinite values", is printed)
4    LOST         a peer vanished: its connection dropped before the job was done (process killed, host down)
5    TIMEOUT      the job, or a phase of it, did not finish in time
6    BAD_DATA     this party's own input is unusable: its file is missing or unreadable, lacks the id column,
                  holds a value that is not a number, NaN or infinity, a magnitude above 1e150
                  (:data:`sqm.framework.tables.MAX_ABS_VALUE`), repeated ids, or labels other than 0 and 1; the other
                  parties exit REFUSED naming this party and a data-free reason
==== ============ =================================================================================================

In every non-zero case nothing was released.  ``sqm pca|logreg --job`` with ``--index I`` exits with party I's
code; run all-local (no ``--index``, or without ``--job`` on the ``mpyc`` backend) it exits with the code of the
job's root cause, :func:`job_exit_code`: the first of BAD_DATA, USAGE, TIMEOUT, ERROR, REFUSED, LOST that some
party exited with (a party killed by a signal counts as LOST): one client's bad file makes it exit BAD_DATA and
the others REFUSED, and the job is a BAD_DATA job.
"""
from __future__ import annotations

EXIT_OK = 0
EXIT_ERROR = 1  # an unexpected error
EXIT_USAGE = 2  # bad command-line options, parameters or job file (argparse's convention)
EXIT_REFUSED = 3  # a party refused the job (mismatched configuration, a malformed message, another party aborted)
EXIT_LOST = 4  # a peer's connection dropped
EXIT_TIMEOUT = 5  # the job did not finish in time
EXIT_BAD_DATA = 6  # this party's own input is unusable (file, values, labels)

NAMES = {EXIT_OK: "ok", EXIT_ERROR: "error", EXIT_USAGE: "bad usage", EXIT_REFUSED: "refused", EXIT_LOST: "lost",
         EXIT_TIMEOUT: "timed out", EXIT_BAD_DATA: "bad data"}

# the root cause of a failed job, most telling first: a party's own bad input or options explain the others'
# refusals; a timeout or an unexpected error explain the lost connections and abort notices that follow them
ROOT_CAUSE_ORDER = (EXIT_BAD_DATA, EXIT_USAGE, EXIT_TIMEOUT, EXIT_ERROR, EXIT_REFUSED, EXIT_LOST)


def job_exit_code(codes) -> int:
    """The exit code of a whole job from its parties' exit codes (a dict party -> code, or a list).

    0 if every party exited 0; otherwise the first code of :data:`ROOT_CAUSE_ORDER` that some party exited
    with.  A negative code (killed by a signal) counts as LOST; a code outside the table as ERROR."""
    values = list(codes.values()) if isinstance(codes, dict) else list(codes)
    seen = set()
    for c in values:
        if c is None or c == EXIT_OK:
            continue
        c = int(c)
        seen.add(EXIT_LOST if c < 0 else c if c in NAMES else EXIT_ERROR)
    for c in ROOT_CAUSE_ORDER:
        if c in seen:
            return c
    return EXIT_OK
