"""``python -m bench NAME [options]`` from a source checkout: the benchmarks (:func:`bench.command.main`)."""
import sys

from bench.command import main

sys.exit(main())
