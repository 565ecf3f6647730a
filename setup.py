"""The optional compiled kernels: dependent rounding (sqm/mechanism/_dependent_round.c) and the fully linear
proof's prover (sqm/mpc/protocols/_flp_kernel.c); pyproject.toml holds every other setting.  ``optional=True``:
where one does not compile, the package installs without it and :mod:`sqm.mechanism.quantize` (or
:mod:`sqm.mpc.protocols.flp`) runs its numpy kernel, which gives the same integers (field elements)."""
from setuptools import Extension, setup

setup(ext_modules=[Extension(
    "sqm.mechanism._dependent_round", ["sqm/mechanism/_dependent_round.c"],
    # IEEE-754 doubles as numpy computes them: no fused multiply-add, no reassociation
    extra_compile_args=["-O2", "-ffp-contract=off", "-fno-fast-math", "-Wno-psabi"],
    optional=True,
), Extension(
    "sqm.mpc.protocols._flp_kernel", ["sqm/mpc/protocols/_flp_kernel.c"],
    # integer arithmetic only (exact field elements)
    extra_compile_args=["-O3", "-fno-trapping-math", "-ffp-contract=off"], libraries=["m"],
    optional=True,
)])
