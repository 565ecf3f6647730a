"""SQM-PCA's parameters, declared once (:mod:`sqm.mechanism.params`): the estimator's defaults and checks, the job
task's public parameters, the job file's task block and ``sqm pca``'s options all come from :class:`PCAParams`.
Standard library only (``sqm --help`` and a party process import it)."""
from __future__ import annotations

import dataclasses

from sqm.mechanism.params import (CHUNK_ROWS, DELTA, EPSILON, GAMMA, PARTY_BOUNDS, ROBUST_NOISE, ROW_NORM_BOUND,
                                  ROW_NORM_CHECK, VERIFY_INPUTS, VERIFY_SHARING, Integer, Param, Params)

ROW_NORM_BOUND_HELP = (
    "c (default {default}).  Without --job: rows are scaled so the largest norm is c (a data-derived "
    "scaling: the local comparison only), then each party clips its sub-rows to c sqrt(its "
    "columns / all columns) (to c with --row-norm-check).  With --job: each client first "
    "scales its columns to the public bounds declared in the job file (\"bounds\"; none "
    "declared: NO scaling), then clips its sub-rows to its share of c; clipped rows are "
    "counted and a WARNING is printed at that client when more than 1%% of its rows were "
    "clipped")
CHUNK_ROWS_HELP = (
    "with --job: records per chunk of the secure evaluation, the same at every party (default: "
    "2^19 values over all columns, 4,481 records at 117 columns); a party holds about one "
    "chunk of shares at a time, and a party file sorted by id is read chunk by chunk. The "
    "result does not depend on it")
ROW_NORM_CHECK_HELP = (
    "bound whole rows by c inside the secure evaluation, as a curator holding whole rows "
    "would, instead of each client clipping its sub-rows to its share of c: each client "
    "clips its sub-row to c and a secure comparison per record keeps the records whose "
    "quantized squared norm over all columns is within the row limit (every record with "
    "||x|| <= c is kept; nobody learns which records were left out).  About 25 more "
    "exchanges per chunk and several times the bytes (see the docs' benchmarks); works "
    "with shard workers and membership hiding; at least 2 clients")
N_COMPONENTS = Param(5, Integer(1), "principal components k (default {default})", option="components",
                     label="the number of components")


@dataclasses.dataclass(frozen=True)
class PCAParams(Params):
    """One SQM release of X^T X and its top-k eigenvectors: ``n_components`` k, then the SQM release's own
    (:class:`sqm.mechanism.release.SQM`: ``row_norm_bound`` c, each client's share ``party_bounds`` c_j, the
    ``chunk_rows`` of the secure evaluation, ``robust_noise`` k, ``verify_sharing``, ``row_norm_check``,
    ``verify_inputs``)."""

    statistic = "pca"

    n_components: int = N_COMPONENTS.field()
    epsilon: float = EPSILON.field()
    delta: float = DELTA.field()
    gamma: float = GAMMA.field()
    row_norm_bound: float = ROW_NORM_BOUND.field(help=ROW_NORM_BOUND_HELP)
    party_bounds: tuple | None = PARTY_BOUNDS.field()
    chunk_rows: int | None = CHUNK_ROWS.field(help=CHUNK_ROWS_HELP)
    robust_noise: int = ROBUST_NOISE.field()
    verify_sharing: bool = VERIFY_SHARING.field()
    row_norm_check: bool = ROW_NORM_CHECK.field(help=ROW_NORM_CHECK_HELP)
    verify_inputs: bool = VERIFY_INPUTS.field()
