"""What every benchmark does with its report: print the table, write the JSON, draw the plot."""
from __future__ import annotations

import json


def finish(rep: dict, args, print_table=None, plot=None, indent: int = 2) -> int:
    """Print ``rep`` with ``print_table``, write it to ``args.json`` and plot it to ``args.plot`` when given."""
    if print_table is not None:
        print_table(rep)
    if getattr(args, "json", None):
        with open(args.json, "w") as f:
            json.dump(rep, f, indent=indent)
    if plot is not None and getattr(args, "plot", None):
        plot(rep, args.plot)
    return 0
