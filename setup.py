"""The optional compiled kernel of dependent rounding (sqm/mechanism/_dependent_round.c); pyproject.toml holds
every other setting.  ``optional=True``: where it does not compile, the package installs without it and
:mod:`sqm.mechanism.quantize` runs its numpy kernel, which gives the same integers."""
from setuptools import Extension, setup

setup(ext_modules=[Extension(
    "sqm.mechanism._dependent_round", ["sqm/mechanism/_dependent_round.c"],
    # IEEE-754 doubles as numpy computes them: no fused multiply-add, no reassociation
    extra_compile_args=["-O2", "-ffp-contract=off", "-fno-fast-math", "-Wno-psabi"],
    optional=True,
)])
