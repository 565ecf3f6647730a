"""Progress of a party program shown by the command that launched it: the party's program appends lines to a file
on its own machine and the command follows the file, because a party process's own terminal output is not the
user's.  Two kinds of lines: ``"i value"`` (an application's own figure per round, :func:`follow_progress`), and
``"step<TAB>done<TAB>total"`` (:func:`step_lines`, one per report of a long step of any job: ids blinded in the
record alignment, chunks of a secure evaluation, training rounds; :func:`follow_steps` shows one bar per step).

A progress bar is the face's business (:mod:`sqm.cli.progress`): the methods ask :func:`make_bar` for one, and
get tqdm's only where the face (the ``sqm`` command) or the user installed it with :func:`set_bar_factory`;
otherwise a bar that shows nothing.  The library itself prints nothing."""
from __future__ import annotations

import contextlib
import os
from typing import Any


@contextlib.contextmanager
def _tail(path: str, on_line):
    """While the block runs, a thread calls ``on_line(line)`` for each whole line appended to ``path``, and once
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
                            on_line(line)
                            pos += len(line)
    th = threading.Thread(target=tail, daemon=True)
    th.start()
    try:
        yield
    finally:
        stop.set()
        th.join()


def follow_progress(path: str, callback):
    """While the block runs, a thread calls ``callback(i, value)`` for each line ``"i value"`` the server's
    program appends to ``path`` (SQM-LR: round and running figure; PBM-VFL: iterations and loss), and once
    more at the end."""
    def on_line(line: str) -> None:
        i, value = line.split()
        callback(int(i), float(value))
    return _tail(path, on_line)


def report_progress(ctx, step: str, done: int, total: int | None = None) -> None:
    """A party program's progress in a long step: its transport's
    (:meth:`sqm.mpc.net.transport.PartyTransport.progress`), where it has one."""
    report = getattr(ctx, "progress", None)
    if report is not None:
        report(step, done, total)


def step_lines(path: str):
    """A party's progress callback ``(step, done, total)`` (:meth:`sqm.mpc.net.transport.PartyTransport.progress`)
    appending ``"step<TAB>done<TAB>total"`` lines to the new file ``path``, and the function that closes it."""
    f = open(path, "w", buffering=1)  # noqa: SIM115  (closed by the function returned)

    def write(step: str, done: int, total: int | None) -> None:
        f.write(f"{step}\t{done}\t{'' if total is None else total}\n")
    return write, f.close


@contextlib.contextmanager
def follow_steps(path: str, who: str):
    """While the block runs, one bar (:func:`make_bar`) per step that party ``who``'s program reports in ``path``
    (:func:`step_lines`): its units done of those due; a step that starts again (the next evaluation's chunks)
    starts its bar again.  The bars are closed at the end."""
    bars: dict[str, Any] = {}

    def on_line(line: str) -> None:
        step, done_text, total_text = line.rstrip("\n").split("\t")
        done, total = int(done_text), (int(total_text) if total_text else None)
        bar = bars.get(step)
        if bar is None:
            bar = bars[step] = make_bar(total=total, desc=f"{step} ({who})", leave=False, miniters=1)
        elif done < bar.n:
            bar.reset(total=total)
        bar.total = total
        bar.update(done - bar.n)
    try:
        with _tail(path, on_line):
            yield bars
    finally:
        for bar in bars.values():
            bar.close()


class NullBar:
    """A progress bar that shows nothing (the library's default): tqdm's methods the methods call."""

    n = 0
    total = None

    def __init__(self, *args, total=None, **kwargs):
        self.n, self.total = 0, total

    def update(self, k: int = 1) -> None:
        self.n += k

    def reset(self, total=None) -> None:
        self.n = 0

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
