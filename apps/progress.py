"""Progress of a party program shown by the command that launched it: the server's program appends lines
``"i value"`` to a file on its own machine and the command follows the file (:func:`follow_progress`),
because a party process's own terminal output is not the user's."""
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


@contextlib.contextmanager
def progress_bar(path: str, on_line, **tqdm_args):
    """A tqdm bar (``tqdm_args``) that ``on_line(bar, i, value)`` moves for each line the server's program
    appends to ``path`` (:func:`follow_progress`) while the block runs; closed at the end."""
    from tqdm import tqdm

    bar = tqdm(**tqdm_args)
    try:
        with follow_progress(path, lambda i, value: on_line(bar, i, value)):
            yield bar
    finally:
        bar.close()
