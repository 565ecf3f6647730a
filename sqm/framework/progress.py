"""Progress of a party program shown by the command that launched it: the server's program appends lines
``"i value"`` to a file on its own machine and the command follows the file (:func:`follow_progress`),
because a party process's own terminal output is not the user's.

A progress bar is the face's business (:mod:`sqm.cli.progress`): the methods ask :func:`make_bar` for one, and
get tqdm's only where the face (the ``sqm`` command) or the user installed it with :func:`set_bar_factory`;
otherwise a bar that shows nothing.  The library itself prints nothing."""
from __future__ import annotations

import contextlib
import os


@contextlib.contextmanager
def follow_progress(path: str, callback):
    """While the block runs, a thread calls ``callback(i, value)`` for each line ``"i value"`` the server's
    program appends to ``path`` (SQM-LR: round and running figure; a PCA job: chunks done and due), and once
    more at the end."""
    import threading

    stop = threading.Event()

    def tail():
        pos, last = 0, False
        while not last:
            last = stop.wait(0.2)
            if os.path.exists(path):
                with open(path) as f:
                    f.seek(pos)
                    for line in f.readlines():
                        if line.endswith("\n"):
                            i, value = line.split()
                            callback(int(i), float(value))
                            pos += len(line)
    th = threading.Thread(target=tail, daemon=True)
    th.start()
    try:
        yield
    finally:
        stop.set()
        th.join()


class NullBar:
    """A progress bar that shows nothing (the library's default): tqdm's methods the methods call."""

    n = 0

    def __init__(self, *args, **kwargs):
        self.n = 0

    def update(self, k: int = 1) -> None:
        self.n += k

    def set_postfix(self, *args, **kwargs) -> None:
        pass

    def set_postfix_str(self, *args, **kwargs) -> None:
        pass

    def refresh(self) -> None:
        pass

    def close(self) -> None:
        pass


_FACTORY = [NullBar]


def set_bar_factory(factory) -> None:
    """Show progress bars with ``factory`` (called as ``tqdm.tqdm`` is: ``total``, ``desc``, ``disable``,
    ``leave``, ``unit``): ``set_bar_factory(tqdm.tqdm)`` in a notebook or script; the ``sqm`` command does it.
    ``None`` restores the silent default."""
    _FACTORY[0] = factory or NullBar


def make_bar(**kwargs):
    """A progress bar from the installed factory (:func:`set_bar_factory`); a :class:`NullBar` by default."""
    return _FACTORY[0](**kwargs)


@contextlib.contextmanager
def progress_bar(path: str, on_line, **bar_args):
    """A bar (:func:`make_bar` with ``bar_args``) that ``on_line(bar, i, value)`` moves for each line the server's
    program appends to ``path`` (:func:`follow_progress`) while the block runs; closed at the end."""
    bar = make_bar(**bar_args)
    try:
        with follow_progress(path, lambda i, value: on_line(bar, i, value)):
            yield bar
    finally:
        bar.close()
