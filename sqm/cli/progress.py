"""Progress bars on the terminal (tqdm): the face installs them for the library's methods, which ask
:func:`sqm.framework.progress.make_bar` for a bar and show nothing without one."""
from __future__ import annotations

from sqm.framework.progress import set_bar_factory


def install() -> None:
    """Every bar a method asks for from now on is tqdm's (:func:`sqm.framework.progress.set_bar_factory`)."""
    from tqdm import tqdm


    set_bar_factory(tqdm)
