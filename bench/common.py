"""What every benchmark does with its report: print the table, write the JSON, draw the plot."""
from __future__ import annotations

import contextlib

ROW_KEYS = ("rows", "runs", "cases")  # where a benchmark's report keeps its table's rows


@contextlib.contextmanager
def one_thread():
    """Every fit in one thread: torch's intra-op pool and BLAS's and OpenMP's (threadpoolctl), restored after (the
    utility and logistic-regression benches).  Their cells are many small fits (DPSGD's batches of 64 to 256
    records, SQM-LR's d x d solves) that gain nothing from threads, and beside other work a pool's threads wait on
    each other: one DPSGD fit (3,000 x 30, batches of 64, 5 epochs) took 3.29 s with torch's 2 threads and 1.02 s
    with 1 on this project's 2-core machine while two other cells ran.  Only the order of some float sums depends
    on it."""
    from threadpoolctl import threadpool_limits

    try:
        import torch
    except ImportError:  # no torch: BLAS and OpenMP alone
        torch = None
    before = torch.get_num_threads() if torch is not None else None
    with threadpool_limits(limits=1):
        if torch is not None:
            torch.set_num_threads(1)
        try:
            yield
        finally:
            if torch is not None and before is not None:
                torch.set_num_threads(before)


def results(rep: dict) -> list[dict]:
    """A benchmark report's rows (its first list of dicts under :data:`ROW_KEYS`); else one row of its
    top-level scalar figures."""
    for key in ROW_KEYS:
        rows = rep.get(key)
        if isinstance(rows, list) and rows and all(isinstance(r, dict) for r in rows):
            return rows
    return [{k: v for k, v in rep.items() if v is None or isinstance(v, (bool, int, float, str))}]


def finish(rep: dict, args, print_table=None, plot=None, indent: int = 2) -> int:
    """Print ``rep`` with ``print_table``, write it to ``args.json`` (an :mod:`sqm.cli.output` document of mode
    "bench": the rows as results, the whole report under details) and plot it to ``args.plot`` when given."""
    if print_table is not None:
        print_table(rep)
    if getattr(args, "json", None):
        from sqm.cli import output

        seconds = rep.get("seconds")
        output.write(args.json, output.document(
            output.command_name(args), "bench", parameters=output.parameters(args), results=results(rep),
            timings={"total": seconds} if isinstance(seconds, (int, float)) else {}, details=rep), indent)
    if plot is not None and getattr(args, "plot", None):
        plot(rep, args.plot)
    return 0


def relation_note() -> str:
    """The note a bench prints under a table whose epsilons are all record-level (SQM's and every baseline's:
    zero-out), indented as the notes under a command's table (:func:`sqm.cli.tables.relation_line`)."""
    from sqm.cli.tables import relation_line
    from sqm.mechanism.report import ZERO_OUT

    return "  " + relation_line([("", ZERO_OUT)])


def relation_words() -> str:
    """Zero-out's words, for a title line that prints an epsilon (:func:`sqm.mechanism.report.relation_phrase`)."""
    from sqm.mechanism.report import ZERO_OUT, relation_phrase

    return relation_phrase(ZERO_OUT)


def children_cpu() -> float:
    """CPU seconds (user + system) of this process's reaped children so far."""
    import resource

    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime
