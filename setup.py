"""The optional compiled kernels: dependent rounding (sqm/mechanism/_dependent_round.c), the fully linear
proof's prover and the input proof's steps (sqm/mpc/protocols/_flp_kernel.c) and the wire's bit packing
(sqm/mpc/net/_wire_kernel.c); pyproject.toml holds every other setting.  ``optional=True``: where one does not
compile, the package installs without it and :mod:`sqm.mechanism.quantize` (or :mod:`sqm.mpc.protocols.flp`,
:mod:`sqm.mpc.protocols.input_proof`, :mod:`sqm.mpc.net.wire`) runs its numpy code, which gives the same integers
(field elements, bytes)."""
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
), Extension(
    "sqm.mpc.net._wire_kernel", ["sqm/mpc/net/_wire_kernel.c"],
    # integer arithmetic only (bytes and exact field elements)
    extra_compile_args=["-O3"],
    optional=True,
)])
