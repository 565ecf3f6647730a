"""``python -m sqm``: the ``sqm`` command (:func:`apps.cli.main`), for an environment without the console script.

This entry point is the one exception to the dependency rule apps -> sqm -> mpc: it imports ``apps`` lazily,
only when run as ``python -m sqm``; nothing in the ``sqm`` library imports ``apps``.
"""
import sys


def main() -> int:
    from apps.cli import main as sqm_main

    return sqm_main()


if __name__ == "__main__":
    sys.exit(main())
