"""``python -m sqm``: the ``sqm`` command (:func:`sqm.cli.command.main`), for an environment without the console
script.  The face is imported only when run so; ``import sqm`` imports nothing of it."""
import sys


def main() -> int:
    from sqm.cli.command import main as sqm_main

    return sqm_main()


if __name__ == "__main__":
    sys.exit(main())
