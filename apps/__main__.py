"""``python -m apps``: the ``sqm`` command (:func:`apps.cli.main`), as ``python -m sqm``."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
