"""The parties' runs of a PBM-VFL training or prediction: real party processes or the same programs in this
process, with a progress bar that follows the server's iterations."""
from __future__ import annotations

from sqm.mpc import runner


def show_iteration(bar, i: int, loss: float) -> None:
    """Move a progress bar to the server's iteration ``i`` with its running ``loss`` (a line of its progress
    file)."""
    bar.n = i
    bar.set_postfix(loss=f"{loss:.4f}", refresh=False)
    bar.refresh()


def run_programs(programs: list, backend: str, timeout: float = 3600.0, threads: int = 1,
                 progress: int | None = None) -> list[dict]:
    """The parties' records: real MPyC processes ('mpyc') or the same programs in this process ('plain').  The
    in-process run gets the programs as a party process would, through their serialization (each party its own
    copy of its torch objects).  ``progress``: the training's iterations, shown as a bar that follows the
    server's progress file."""
    import contextlib
    import pickle
    import tempfile

    run = runner(backend)
    if backend != "mpyc":
        programs = [pickle.loads(pickle.dumps(p)) for p in programs]
    with contextlib.ExitStack() as stack:
        if progress:
            from sqm.framework.progress import progress_bar

            path = f"{stack.enter_context(tempfile.TemporaryDirectory(prefix='sqm-vfl-'))}/progress"
            programs[0].progress_path = path

            stack.enter_context(progress_bar(path, show_iteration, total=progress,
                                             desc=f"PBM-VFL iterations ({backend})", unit="it"))
        if backend == "mpyc":
            return run(programs, timeout=timeout)
        import torch

        old = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            return run(programs, timeout=timeout)
        finally:
            torch.set_num_threads(old)
