"""Progress bars on the terminal (tqdm): the face installs them for the library's methods, which ask
:func:`sqm.framework.progress.make_bar` for a bar and show nothing without one.  ``-q/--quiet`` (on every command,
:func:`sqm.cli.options.add_verbosity`) installs none: a script's stderr then holds warnings and errors only.
Bars are drawn only where stderr is a terminal (tqdm's ``disable=None``): redirected to a file, it holds no cursor
movements."""
from __future__ import annotations

import contextlib

from sqm.framework.progress import set_bar_factory


def install(quiet: bool = False) -> None:
    """Every bar a method asks for from now on is tqdm's (:func:`sqm.framework.progress.set_bar_factory`), or,
    ``quiet``, one that shows nothing."""
    if quiet:
        set_bar_factory(None)
        return
    import functools

    from tqdm import tqdm

    set_bar_factory(functools.partial(tqdm, disable=None))  # drawn on a terminal only: a log file gets no bar frames


@contextlib.contextmanager
def job_progress(args, task):
    """While a job runs, a bar per long step of the party this command shows (``--index``'s, or client 1's when it
    runs every party: the server, which may hold no shares, is not the pace): the record alignment's ids blinded,
    each secure evaluation's chunks, training rounds (:func:`sqm.framework.progress.follow_steps`).  The party
    reports them to a file in a private folder of this machine (``task.steps_path``); ``-q``: none."""
    if getattr(args, "quiet", 0):
        yield
        return
    from sqm.framework.progress import follow_steps
    from sqm.mpc.net.launch import private_folder

    index = getattr(args, "index", None)
    pid = 1 if index is None else index
    with private_folder("sqm-progress-") as folder:
        task.steps_path = f"{folder}/steps"
        with follow_steps(f"{task.steps_path}.{pid}", "server" if pid == 0 else f"client {pid}"):
            yield
