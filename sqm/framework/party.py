"""What one party of a job-file job does (:class:`JobParty`, run inside ``python -m sqm.mpc.net.party``), and
the helpers it uses: the seed policy, loading and checking its own file, scaling declared column ranges, the
program of each party (:func:`party_program`).  The steps:

1. all parties check that they run the same task with the same public parameters;
2. each client loads ONLY its own file (the program it is given names no other party's file) and checks
   it: the file exists, has records and feature columns, numbers only, nothing missing, no infinity, no
   missing and no repeated ids (compared in their canonical form, :func:`sqm.framework.tables.canonical_id`:
   ``007`` and ``7`` are one id), and the columns its ``bounds`` declare; it puts its rows in
   :func:`canonical_order` of their ids (one total order, computed from its own ids alone);
3. the clients tell everyone their column and record counts and column names (the public schema of a valid
   file) or a short category of their problem (never a cell value, an id, a header or a path: the full
   detail is printed at that party only); on any problem every party refuses, naming the client, before
   any share is sent;
4. the clients align their records by private set intersection (:mod:`sqm.framework.alignment`, protocol
   :mod:`sqm.mpc.protocols.psi`), each party first refusing set sizes beyond its own policy (``max_set_ratio``): no id
   leaves its owner except blinded under a key the receiver does not hold; each client keeps the records every
   client holds, in canonical order, and the job's record count is the intersection size (refused below
   ``min_intersection``, default 100: job file ``"min_intersection"``, or ``--min-intersection``); with membership
   hidden the records go over S positions (the sum of the set sizes), the count the job plans from, and only the
   server learns the intersection size (:class:`JobMeta`); a client with declared ``bounds`` scales them;
5. every party that keeps a privacy-budget ledger (the server's operator; each client, by default) checks the
   release (the task's ``release(meta)`` events) against its dataset in it
   (:class:`sqm.framework.ledger_guard.LedgerGuard`: a client's is the one its owner binds its file's digest to,
   never the job file's, and its record alignment was counted before the PSI, refused at its owner's cap); one
   verdict exchange, and a party over its own budget refuses the job before any share is sent; otherwise each
   records the release (a client's entry is refunded if the job ends before it sent its shares of any output);
6. the task (e.g. :class:`sqm.apps.pca.PCAJobTask`, through :func:`sqm.mechanism.release.sqm_round`) plans the public
   release from the counts and runs it: each client clips its own rows to its bound, counts the clipped rows
   (reported to that party only, with a WARNING above 1% of its rows (:func:`clip_warning`): the count is
   data-dependent and is not released to the server), and its input carries the digest of its records'
   order from the alignment, which the clients compare among themselves again before any share is sent;
7. a task whose release is a model (``releases_model``): the server sends the model to every client, whose ledger
   records its digest with the job's entry (what a scoring job later checks its model against).
"""
from __future__ import annotations

import dataclasses
import functools
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from sqm.framework.alignment import (
    DEFAULT_ALIGNMENT_KEYS,
    DEFAULT_MAX_SET_RATIO,
    DEFAULT_MIN_INTERSECTION,
    align_records,
    check_max_set_ratio,
    hide_membership,
    runs_bucketed,
)
from sqm.framework.jobtask import JobTask
from sqm.framework.spec import JobSpec, read_party_csv
from sqm.framework.sql_tables import SqlSource, read_sql_table
from sqm.framework.tables import PartyFileError, PartyTable, id_order_key
from sqm.mechanism.vertical import party_norm_bounds
from sqm.errors import UsageError
from sqm.mpc.net.party import InputRefused, PartyProgram, ProtocolError, public_digest
from sqm.mpc.net.party import messages as wire
from sqm.mpc.net.abort import party_label, refused
from sqm.mpc.net.logs import NOTICE
from sqm.mpc.protocols.api import Transport
from sqm.mpc.protocols.context import PartyContext
from sqm.mpc.protocols.psi_pool import pooled

if TYPE_CHECKING:
    from sqm.framework.ledger_guard import LedgerGuard
    from sqm.framework.table_stream import StreamedTable

log = logging.getLogger(__name__)


def declared_scales(task: JobTask, meta: JobMeta, bounds, pid: int) -> dict[str, float]:
    """Client ``pid``'s declared columns -> the factor :func:`scale_to_bounds` multiplies each by: the column's
    bound over ``max(|lo|, |hi|)``, a column's bound being its share of the task's row norm bound,
    c_j / sqrt(its columns) (c_j: :func:`sqm.mechanism.vertical.party_norm_bounds`, over the columns the task's
    ``feature_counts(meta)`` counts), or what the task's ``declared_bound`` says (a regression label).  Public:
    the client and the server compute the same factors from the job file and the public counts."""
    if not bounds:
        return {}
    if task.clamp_only:
        return {col: 1.0 for col, _, _ in bounds}
    if task.row_norm_bound is None:  # takes_bounds: a row norm bound or clamp_only
        raise UsageError(f"{type(task).__name__} takes no declared column ranges")
    counts = task.feature_counts(meta)
    c_j = party_norm_bounds(task.row_norm_bound, counts, task.party_bounds)[pid - 1]
    col_bound = float(c_j) / np.sqrt(counts[pid - 1])
    return {col: float(task.declared_bound(col, col_bound)) / max(abs(lo), abs(hi)) for col, lo, hi in bounds}


def scale_to_bounds(block: np.ndarray, columns, bounds, factors: dict[str, float]) -> tuple[np.ndarray, int]:
    """A client's block with each declared column clamped to its public range [lo, hi] and multiplied by its
    factor (:func:`declared_scales`; zero stays zero: a range [-a, a] maps to [-b, b], [0, a] to [0, b]);
    undeclared columns are left as they are.  Returns it and how many values lay outside their ranges."""
    out = np.array(block, dtype=np.float64)
    at = {c: j for j, c in enumerate(columns)}
    outside = 0
    for col, lo, hi in bounds:
        j = at[col]
        outside += int(np.count_nonzero((out[:, j] < lo) | (out[:, j] > hi)))
        out[:, j] = np.clip(out[:, j], lo, hi) * factors[col]
    return out, outside


@dataclass(frozen=True)
class JobMeta:
    """Public facts every party learns before the task runs: the clients' column counts and the record count the
    job's evaluation runs over: the size m of the record alignment's intersection, or, with membership hidden, the
    S positions the clients' records are placed over (``union``: S, the sum of the set sizes, a function of the
    public sizes only; 0: membership revealed); ``columns``: every client's column names, in client order (the
    public schema; empty where not known).  ``members``: with membership hidden, m at the server, which deals the
    indicator, and None at a client, which must not learn it (:attr:`records_released`)."""

    col_counts: tuple[int, ...]
    n_records: int
    union: int = 0
    columns: tuple = ()
    members: int | None = None

    @property
    def n_parties(self) -> int:
        return len(self.col_counts)

    @property
    def records_released(self) -> int:
        """The records the release is over (m), for the server's post-processing (e.g. a covariance divided by
        n).  With membership hidden only the server knows it: a client asking is a bug, refused."""
        if not self.union:
            return self.n_records
        if self.members is None:
            raise UsageError("with membership hidden a client does not know the intersection size (only the server "
                             "does): nothing at a client may depend on it")
        return self.members


HIDDEN_NOTE = ("membership hidden: the clients' records went over {s} positions (the sum of the set sizes, public; "
               "{u} of them hold an id), each multiplied inside the protocol by its secret membership of the "
               "intersection; no client was told the union or the intersection size")
ALIGNMENT_NOTE = ("records: the {m} records all {k} clients hold (private set intersection of their ids); the "
                  "intersection size is released exactly, like n; adding or removing one person at one "
                  "organisation changes the intersection by at most one record, so the per-record sensitivity holds")


INSECURE_WARNING = ("WARNING: --insecure-reproducible: every party's randomness (Skellam noise, rounding, "
                    "shares' keys) is derived from --seed {seed}; whoever knows the seed can regenerate every "
                    "party's noise and remove it, so the result is NOT differentially private against them. "
                    "For reproducible experiments only (JSON: \"secure_mode\": false).")


def seed_policy(seed, insecure_reproducible: bool = False, warn: bool = True) -> bool:
    """``secure_mode`` of a job-mode run (``sqm pca --job``, ``sqm logreg --job``): True without a seed.

    A seed in job mode is refused (ValueError naming ``--insecure-reproducible``) unless the user opts in;
    with the opt-in a WARNING line goes to stderr (``warn``) and the run is recorded as ``secure_mode``
    false.  The seed itself is never sent: each party derives its own seed from the one on its own command
    line (``sqm.mechanism.rng.spawn_seeds(seed, M)[index]``)."""
    if seed is None:
        return True
    if not insecure_reproducible:
        raise UsageError(f"--seed {seed} is refused in job mode: whoever knows a seed can regenerate every "
                         f"party's noise, so the server could remove it.  Leave --seed out (each party draws "
                         f"its own randomness from OS entropy), or pass --insecure-reproducible for a "
                         f"reproducible experiment whose result is not private against anyone knowing the seed")
    if warn:
        log.warning(INSECURE_WARNING.format(seed=seed))
    return False


class JobParty(PartyProgram):
    """Party ``index`` of a job-file job; holds only its own file path (None at the server).  ``dataset``: the
    job file's dataset id (public, agreed); ``ledger``: this party's :class:`LedgerGuard` (the server's, or a
    client's own ledger of its records' releases; None: none)."""

    def __init__(self, index: int, file: str | SqlSource | None, id_column: str, task: JobTask,
                 dataset: str | None = None,
                 ledger: LedgerGuard | None = None, bounds: tuple = (), drop_columns: tuple = (),
                 min_intersection: int = DEFAULT_MIN_INTERSECTION, shards: tuple | None = None,
                 hide_membership: bool = False, max_set_ratio: float = DEFAULT_MAX_SET_RATIO,
                 alignment_keys: str = DEFAULT_ALIGNMENT_KEYS):
        self.index, self.file, self.id_column, self.task = index, file, id_column, task
        self.shards = shards  # (count, this party's own workers' addresses, its own engine) or None
        self.hide_membership = bool(hide_membership)  # align over the union, members only inside the protocol
        self.all_keys = alignment_keys == "all"  # the PSI under every client's key, not only the threshold's
        self.dataset, self.ledger, self.bounds = dataset, ledger, tuple(bounds)
        self.drop_columns = tuple(drop_columns)
        self.min_intersection = int(min_intersection)
        self.max_set_ratio = float(max_set_ratio)  # this party's own size policy (not agreed: not in public())

    @property
    def own_bounds(self) -> tuple:
        """This client's declared column ranges (the job file's, public; ``()``: none, or the server)."""
        return self.bounds[self.index - 1] if self.index > 0 and self.bounds else ()

    def public(self):
        extra = [self.bounds] if any(self.bounds) else []  # every client's declared ranges, agreed by all
        extra += [("drop", self.drop_columns)] if self.drop_columns else []  # the columns left out, agreed
        extra += [("hide_membership",)] if self.hide_membership else []
        extra += [("alignment_keys", "all")] if self.all_keys else []
        if self.shards is not None:  # the shard count, agreed (each party announces its own workers' addresses)
            extra += [("shards", int(self.shards[0]))]
        return ["sqm-jobfile", self.id_column, self.dataset, self.task.public(), ("min_intersection",
                                                                                 self.min_intersection), *extra]

    async def _budget_verdict(self, ctx, meta: JobMeta) -> None:
        """Every party whose operator keeps a privacy-budget ledger checks this job against it (nothing recorded
        yet); one exchange tells every party each verdict, so that a party over its own budget refuses the job
        before ANY party sends a share, and no other party's ledger is charged for a job that never ran.  The
        verdicts are public ("" or e.g. "the job would exceed its own privacy budget"; the server's names the job
        file's dataset): a refusing party's figures, and a client's name for its dataset, stay with its operator."""
        mine = None if self.ledger is None else self.ledger.refusal(self.task, meta)
        if mine is not None:  # tell every party why, then refuse without waiting for anyone
            await ctx.send_recv({q: mine[1] for q in range(ctx.M)}, [], None, "budget verdict")
            raise ProtocolError(f"{party_label(ctx.pid)} refused before any share was sent: {mine[0]}",
                                public=f"refused before any share was sent: {mine[1]}")
        got = await ctx.send_recv({q: "" for q in range(ctx.M)}, range(ctx.M),
                                  wire.value(str, "a budget verdict", lambda v: len(v) <= 500), "budget verdict")
        bad = [(q, v) for q, v in enumerate(got) if v and q != ctx.pid]
        if bad:
            raise ProtocolError(f"refused before any share was sent: {party_label(bad[0][0])} refused: {bad[0][1]}")

    def _scaled(self, table, meta: JobMeta, pid: int) -> tuple[PartyTable | StreamedTable, int | None]:
        """This client's table scaled to its declared ranges (:func:`declared_scales`), so a row inside the
        declared ranges is never clipped."""
        factors = declared_scales(self.task, meta, self.own_bounds, pid)
        if hasattr(table, "with_transform"):  # read chunk by chunk: each chunk is scaled as it is read
            # a partial, not a closure: a shard worker of this party gets the table pickled (sqm.mpc.protocols.shards)
            return table.with_transform(functools.partial(scale_to_bounds, columns=table.columns,
                                                          bounds=self.own_bounds, factors=factors)), None
        block, outside = scale_to_bounds(table.block, table.columns, self.own_bounds, factors)
        return dataclasses.replace(table, block=block), outside

    def describe(self) -> str:
        """The task and a digest of its public parameters (no file, no seed): compared before anything else."""
        return (f"job file task {type(self.task).__name__} (id column {self.id_column!r}, public parameters "
                f"{public_digest(self.public())[:16]})")

    def announcement(self, ctx, mine: dict | None, sizes: dict[int, int]) -> str:
        """What this party is about to do, for its operator, once every party's set size is known and before any
        value derived from its records (a blinded id, a share) is sent: the job, the task and its privacy target,
        this party's columns, every party's record count and who learns the result."""
        job = getattr(getattr(ctx, "session", None), "job_id", None)
        own = "" if mine is None else (f"its {mine['rows']:,} records of columns {', '.join(mine['names'])}; ")
        held = ", ".join(f"{party_label(j)} {v:,} records" for j, v in sorted(sizes.items()) if j != ctx.pid)
        mode = "hiding membership" if self.hide_membership else "revealing to each holder which of its records match"
        return (f"about to run job {str(job)[:8] + '... ' if job else ''}"
                f"{self.task.summary()}; {own}peers hold: {held}; switches: {self.switches()}; next, the record "
                f"alignment ({mode}), then shares; nothing derived from records has been sent yet")

    def switches(self) -> str:
        """Every privacy-relevant switch of this job, in words for the operator: the release's declared parameters
        (:mod:`sqm.mechanism.params`), the alignment's (membership, the least intersection, this party's size
        policy), the ledger's and whether the randomness is seeded (insecure, reproducible)."""
        parts = [f"{name} {value}" for name, value in self.task.switches().items()]
        parts += [f"hide_membership {self.hide_membership}",
                  f"alignment_keys {'all' if self.all_keys else DEFAULT_ALIGNMENT_KEYS}",
                  f"min_intersection {self.min_intersection}",
                  f"max_set_ratio {self.max_set_ratio:g}",
                  f"ledger {'kept' if self.ledger is not None else 'none'}"]
        return ", ".join(parts)

    async def run(self, ctx: Transport):
        path = self.task.steps_path
        if not path:
            return await self._run(ctx)
        from sqm.framework.progress import step_lines

        ctx.on_progress, close = step_lines(f"{path}.{ctx.pid}")  # this party's long steps, for its own command
        try:
            return await self._run(ctx)
        finally:
            ctx.on_progress = None
            close()

    async def _run(self, ctx: Transport):
        if ctx.pid != self.index:
            raise ProtocolError(f"party started as index {ctx.pid} but its program is for party {self.index}")
        await ctx.agree(tuple(self.public()), "task")
        runner = await self._shard_runner(ctx)
        holders = ([0] if self.task.server_table else []) + list(ctx.clients)  # who holds a table of records
        table, mine = None, None
        if ctx.pid in holders:
            table, mine = load_own_file(self.file, self.id_column, ctx.pid, self.own_bounds,
                                        () if ctx.is_server else self.drop_columns,
                                        stream=bool(self.task.streams) and not ctx.is_server)
            problem = self.task.check_table(table, ctx.pid, len(ctx.clients)) if isinstance(table, PartyTable) \
                else None
            if problem is not None:  # its own data refused: the detail here, the public reason to every peer
                log.error(f"{party_label(ctx.pid)}: party file {self.file}: {problem[0]}")
                table, mine = None, {"error": problem[1]}
        columns, sizes, cols = await self._schemas(ctx, holders, mine)
        log.log(NOTICE, self.announcement(ctx, mine, sizes))  # shown unless -q
        union, withheld = None, None
        # its local processes hash, blind and check, unless its shard workers run the alignment's buckets
        local = None if runner is None or runs_bucketed(ctx, sizes, self.all_keys, runner, self.hide_membership) \
            else runner.count
        with pooled(local, ctx.pid, log):
            if self.hide_membership:  # over S positions: the evaluation multiplies each record by its membership
                table, union, withheld = await hide_membership(ctx, table, sizes, self.min_intersection,
                                                               self.task.seed, self.max_set_ratio,
                                                               self.all_keys)
                n_common = union.intersection  # m at the server; None at a client, which is not told it
                meta = JobMeta(cols, int(union.size), int(union.size), tuple(columns), members=n_common)
            else:
                table, n_common = await align_records(ctx, table, sizes, self.min_intersection, self.task.seed,
                                                      self.max_set_ratio, self.all_keys, runner)
                meta = JobMeta(cols, n_common, columns=tuple(columns))
        outside = None
        if table is not None and self.own_bounds:  # scaled to the job file's public ranges
            table, outside = self._scaled(table, meta, ctx.pid)
        charged = self.task.charges
        if charged:
            await self._budget_verdict(ctx, meta)  # every party's own ledger agrees, or nobody sends a share
        entry = None
        if self.ledger is not None and charged:  # charged before any share: refused if over budget
            entry = self.ledger.reserve(self.task, meta)
            if self.ledger.client:  # marked in the ledger just before this client's shares of an output go
                ctx.before_output_shares = entry.shares_sent
        task = self.task if self.ledger is None else self.task.with_ledger(self.ledger)
        try:
            result = await task.run(PartyContext(ctx, shards=runner, membership=union), table, meta)
        except BaseException:
            if entry is not None:  # refunded only if this client sent no share of any output; else counted
                entry.fail(refund=self.ledger is not None and self.ledger.client and not ctx.output_shares_sent)
            raise
        finally:
            if hasattr(table, "close"):  # a table over the union on disk: its bucket files go now
                table.close()
        self._describe(ctx, result, meta, table, outside, columns, sizes, union, n_common)
        model = None
        if self.task.releases_model:
            try:
                model = await self._released_model(ctx, result)
            except BaseException:
                if entry is not None:
                    entry.fail()  # the release was made: counted
                raise
        if entry is not None:
            entry.complete(model)
            result.setdefault("ledger", {k: entry[k] for k in ("id", "dataset", "statistic", "epsilon", "delta",
                                                               "status", "spent", "left", "ledger")})
        if self.ledger is not None and self.ledger.client:
            result.setdefault("ledger_dataset", self.ledger.account)
        if withheld is not None:  # the server alone: below --min-intersection, membership hidden; the release (of
            # an all-zero indicator: noise only) ran to its end, so every client's view is unchanged
            return {"withheld": withheld, **{k: result[k] for k in ("alignment", "ledger") if k in result}}
        return result

    async def _shard_runner(self, ctx: Transport):
        """This party's shard workers (every party's workers' addresses agreed, each announced by its own party),
        or None: its evaluations run in this process."""
        if self.shards is None:
            return None
        from sqm.mpc.protocols.shards import ShardRunner, agree_worker_addresses

        count, own, engine = self.shards
        table = await agree_worker_addresses(ctx, count, own)
        if ctx.session is None:  # the simulation: no worker processes
            return None
        return ShardRunner(count, table, engine, wrap=getattr(self, "shard_wrap", None))

    async def _schemas(self, ctx: Transport, holders: list[int], mine: dict | None):
        """Every holder's schema (or its refusal) exchanged: (the job's columns in client order, each holder's
        record count, each client's column count); refused at once if any holder refused its own file or its
        owner's ledger refused."""
        mine, by_ledger = self._open_ledger(ctx, mine)  # a client's own dataset; this alignment counted
        out = {p: mine for p in range(ctx.M)} if mine is not None else {}
        if mine is not None and "error" in mine:  # its own file: tell everyone why and refuse at once (BAD_DATA)
            await ctx.send_recv(out, [], None, "client schemas")
            if by_ledger:  # its owner's ledger refuses (binding, alignment cap): refused, not bad data
                raise ProtocolError(f"{party_label(ctx.pid)} refused before any share was sent: {by_ledger}",
                                    public=f"refused before any share was sent: {mine['error']}")
            raise InputRefused(f"{mine['error']} (refused before any share was sent)", "see the detail above")
        got = await ctx.send_recv(out, holders, wire.value(dict, "the party's schema or its refusal", _schema_ok),
                                  "client schemas")
        errors = [f"{party_label(j)} refused: {g['error']}" for j, g in zip(holders, got, strict=False) if "error" in g]
        if errors:  # only the parties' short categories: this message also goes to every peer
            raise refused("; ".join(errors))
        schemas = dict(zip(holders, got, strict=False))
        got = [schemas[j] for j in ctx.clients]  # the clients' columns are the job's columns
        dropped = {c for g in got for c in g.get("dropped", ())}
        unknown = [c for c in self.drop_columns if c not in dropped]
        if unknown:  # a typo is an error, never silently ignored (column names are the public schema)
            raise refused(f"no client's file has the column(s) {unknown} named by --drop-columns")
        columns = [c for g in got for c in g["names"]]  # public schema: every client's column names, in order
        sizes = {j: int(schemas[j]["rows"]) for j in holders}
        return columns, sizes, tuple(int(g["cols"]) for g in got)

    def _describe(self, ctx: Transport, result: dict, meta, table, outside, columns, sizes, union, n_common) -> None:
        """What this party's result says beside the release: the report's alignment note, the alignment's public
        counts, a client's file and its values outside the declared ranges, the server's columns and scales."""
        rep = result.get("report")  # the release's report (the server's) says what n is and that it is public
        if rep is not None:
            old = rep.get("notes") if isinstance(rep, dict) else rep.notes
            note = ALIGNMENT_NOTE.format(m=n_common, k=len(sizes))
            if union is not None:
                note += "; " + HIDDEN_NOTE.format(s=union.size, u=union.union)
            notes = "; ".join(x for x in (old, note) if x)
            result["report"] = ({**rep, "notes": notes} if isinstance(rep, dict)
                                else dataclasses.replace(rep, notes=notes))
        result.setdefault("col_counts", list(meta.col_counts))
        alignment: dict[str, object] = {"records": {str(j): v for j, v in sizes.items()}}
        if union is None:
            alignment["intersection"] = n_common
        else:  # membership hidden: S at every party; U and m at the server only
            alignment.update({"positions": int(union.size), "membership": "hidden"})
            if ctx.is_server:
                alignment.update({"intersection": n_common, "union": int(union.union)})
        if n_common is not None:
            result.setdefault("n_records", n_common)
        result.setdefault("alignment", alignment)
        if table is not None and not ctx.is_server:
            result.setdefault("file", str(table.file))
            if outside is None and getattr(table, "transform", None) is not None:
                outside = table.transformed_count  # counted while the task read the chunks
            if outside is not None:
                result.setdefault("outside_declared_range", outside)  # this client's own count
        elif ctx.is_server:
            result.setdefault("columns", columns)
            # public: what each released column was multiplied by (1 where no range is declared), so that a
            # released model can be given in the units of the owners' raw columns
            scales = {c: 1.0 for c in columns}
            for j, b in enumerate(self.bounds, 1):
                scales.update(declared_scales(self.task, meta, b, j))
            result.setdefault("column_scales", scales)

    def _open_ledger(self, ctx, mine: dict | None) -> tuple[dict | None, str]:
        """A client that keeps a ledger, its file read: the dataset it charges (its owner's name bound to the
        file's content digest, :meth:`LedgerGuard.opened`) and this job's record alignment counted against its
        owner's cap, before the PSI.  Returns its schema message (on refusal the ledger's public reason) and the
        refusal's detail for its own operator ("" if none)."""
        if self.ledger is None or ctx.is_server or mine is None or "error" in mine:
            return mine, ""
        from sqm.mechanism.ledger import BudgetError

        try:
            self.ledger = self.ledger.opened(self.file)
            n = self.ledger.count_alignment()
        except BudgetError as e:
            log.error(f"{party_label(ctx.pid)}: {e}")
            return {"error": e.public}, str(e)
        cap = self.ledger.max_alignments
        log.info(f"{party_label(ctx.pid)}: ledger dataset {self.ledger.account!r}: record alignment {n}"
                 + (f" of at most {cap}" if cap is not None else ""))
        return mine, ""

    async def _released_model(self, ctx, result: dict) -> tuple[str, str] | None:
        """The job's end, for a task whose release is a model: the server sends it (the task's
        ``released_model``, the model the command's ``--json`` holds) to every client; a client checks it and
        returns (its digest, its numbers as JSON) for its ledger entry (:mod:`sqm.framework.released_models`).
        The model is the release, which the clients learn as well: ``epsilon_client`` is its guarantee against a
        client (which knows its own noise share)."""
        from sqm.framework import released_models as rm

        mine = self.task.released_model(result) if ctx.is_server else None
        got = await ctx.broadcast(mine, wire.value(dict, "the released model", rm.frame_ok), step="released model")
        try:
            model = rm.from_frame(got)
        except UsageError as e:
            raise ProtocolError(f"{party_label(ctx.pid)}: the server's released model is malformed ({e})") from None
        digest = rm.model_digest(model)
        if ctx.is_server:
            result.setdefault("model_digest", digest)
        return digest, rm.to_json(model)


def canonical_order(ids) -> list[int]:
    """The row order every client computes alone from its own canonical ids
    (:func:`sqm.framework.tables.id_order_key`: integers by value, then text ids by text), one total order whatever
    else a client holds, so the records two clients have in common come in the same order at both; nothing
    is sent."""
    return sorted(range(len(ids)), key=lambda r: id_order_key(ids[r]))


def load_own_file(file, id_column: str, pid: int, bounds: tuple = (), drop_columns: tuple = (),
                  stream: bool = False) -> tuple[PartyTable | StreamedTable | None, dict]:
    """A client's table, its rows in :func:`canonical_order` of their ids, and the schema message it sends
    every party: ``{"cols", "rows", "names"}`` (its column names: the public schema of a valid file; with
    ``drop_columns`` also ``"dropped"``: those of them it held and left out), or ``{"error": short category}``
    naming no path, header or value (the full detail is printed here only).  ``bounds``: its declared column
    ranges; a declared column missing from the file is refused.  ``file`` may be a database query
    (:class:`sqm.framework.sql_tables.SqlSource`), read and checked as a file is.  ``stream``: a file already in
    canonical order is checked in one pass and read again chunk by chunk when used
    (:class:`sqm.framework.table_stream.StreamedTable`: bounded memory); any other file is read whole, as without."""
    dropped: list[str] = []
    try:
        table: PartyTable | StreamedTable | None = None
        if stream:
            from sqm.framework.table_stream import scan_table

            table = scan_table(file, id_column)
            if table is not None:
                log.info(f"client {pid}: party file {file}: {table.n_rows:,} records checked; read in chunks")
        if table is None:
            whole = (read_sql_table(file, id_column) if isinstance(file, SqlSource)
                     else read_party_csv(file, id_column))
            table = whole.reordered(canonical_order(whole.ids))
        if drop_columns:
            dropped = [c for c in table.columns if c in drop_columns]
            keep = [j for j, c in enumerate(table.columns) if c not in drop_columns]
            if not keep:
                raise PartyFileError(f"party file {file}: --drop-columns leaves none of its columns {table.columns}",
                                     "--drop-columns leaves none of its columns")
            table = table.select(keep)
        absent = [c for c, _, _ in bounds if c not in table.columns]
        if absent:
            raise PartyFileError(f"party file {file} lacks the column(s) {absent} whose ranges the job file "
                                 f"declares (\"bounds\"); its columns are {table.columns}",
                                 "its file lacks columns whose ranges the job file declares")
    except PartyFileError as e:
        log.error(f"client {pid}: {e}")
        return None, {"error": e.public}
    except OSError as e:
        log.error(f"client {pid}: party file {file} could not be read: {e}")
        return None, {"error": "its party file could not be read"}
    schema = {"cols": table.n_cols, "rows": table.n_rows, "names": list(table.columns)}
    return table, ({**schema, "dropped": dropped} if drop_columns else schema)


def _schema_ok(g) -> bool:
    """A client's schema message: {"cols": int >= 1, "rows": int >= 1, "names": cols short strings} or
    {"error": short text}."""
    if set(g) == {"error"}:
        return isinstance(g["error"], str) and len(g["error"]) < 2000
    dropped = g.get("dropped", [])
    return (set(g) - {"dropped"} == {"cols", "rows", "names"}
            and isinstance(dropped, list) and all(isinstance(n, str) and len(n) <= 1000 for n in dropped)
            and all(type(g[k]) is int and g[k] >= 1 for k in ("cols", "rows"))
            and isinstance(g["names"], list) and len(g["names"]) == g["cols"]
            and all(isinstance(n, str) and len(n) <= 1000 for n in g["names"]))


def party_program(spec: JobSpec, index: int, task: JobTask, ledger: LedgerGuard | None = None,
                  max_set_ratio: float = DEFAULT_MAX_SET_RATIO) -> JobParty:
    """Party ``index``'s program: its own file only (a party never learns where others keep their data), and
    its own ledger guard (``ledger``: the server's, charged to its ``dataset`` or the job file's; or a client's
    own, charged to the dataset its owner binds its file to, never the job file's).  ``max_set_ratio``: its own
    size policy for the record alignment (:func:`sqm.framework.alignment.check_set_sizes`; the operator's
    ``--max-set-ratio``)."""
    if not 0 <= index < len(spec.parties):
        raise UsageError(f"party index {index} out of range: the job file lists {len(spec.parties)} parties "
                         f"(0 = server, 1..{spec.n_clients} clients)")
    if ledger is not None and index == 0:
        account = ledger.dataset or spec.dataset_id
        if account is None:
            raise UsageError(f"job file {spec.path or '(unnamed)'} names no dataset: the server's ledger charges each "
                             f"release to --ledger-dataset, else the job file's \"dataset\" (or its \"name\"); "
                             f"give one")
        ledger = dataclasses.replace(ledger, job_id=spec.job_id, client=False, account=account)
    elif ledger is not None:
        ledger = dataclasses.replace(ledger, job_id=spec.job_id, client=True, account=None)
    where = f"job file {spec.path or '(unnamed)'}"
    if index > 0 and spec.parties[index].file is None:
        raise UsageError(f"client {index} has no data file: its operator gives it with --data-file PATH (a job file "
                         f"for parties started one by one names no party's file)")
    if spec.parties[0].file is not None and not task.server_table:
        raise UsageError(f"{where} gives the server a file, but in {type(task).__name__} the server holds no data: "
                         f"remove party 0's \"file\"")
    if index == 0 and task.server_table and spec.parties[0].file is None:
        raise UsageError(f"in {type(task).__name__} the server holds a table of its own (its labels, keyed by the "
                         f"same ids): its operator gives it with --data-file PATH (--index 0)")
    models = [i for i, p in enumerate(spec.parties) if p.model is not None]
    if models and not task.party_models:
        raise UsageError(f"{where} names model code (\"model\") for part{'ies' if len(models) > 1 else 'y'} "
                         f"{models}, which {type(task).__name__} does not use: remove it")
    task = task.for_party(index, spec.parties[index])
    if any(spec.bounds) and not task.takes_bounds:
        raise UsageError(f"job file {spec.path or '(unnamed)'} declares column ranges (\"bounds\"), which "
                         f"{type(task).__name__} does not use: remove them")
    if any(spec.bounds):
        task.check_bounds(spec.bounds)  # e.g. a label column may not be scaled, or its range is the task's
    bounds = task_bounds(spec, task)
    declared = {c for b in bounds for c, _, _ in b}
    if declared & set(spec.drop_columns):
        raise UsageError(f"job file {spec.path or '(unnamed)'} declares ranges for column(s) "
                         f"{sorted(declared & set(spec.drop_columns))} that --drop-columns leaves out: keep one")
    if spec.norm_shares is not None:
        if not task.takes_bounds:
            raise UsageError(f"job file {spec.path or '(unnamed)'} declares norm shares (\"norm_share\"), which "
                             f"{type(task).__name__} does not use: remove them")
        c = task.row_norm_bound
        if c is None:
            raise UsageError(f"job file {spec.path or '(unnamed)'} declares norm shares (\"norm_share\"), which "
                             f"{type(task).__name__} does not use (it clamps only): remove them")
        task = task.with_party_bounds([c * float(np.sqrt(s)) for s in spec.norm_shares])
    shards = None
    if spec.shards is not None:
        if not task.streams:
            raise UsageError(f"job file {spec.path or '(unnamed)'} gives the parties shard workers (\"workers\"), "
                             f"which serve tasks whose records are read in chunks (the PCA job); "
                             f"{type(task).__name__} is not one: remove \"workers\"")
        addresses = spec.shard_addresses()
        assert addresses is not None  # spec.shards is set
        shards = (spec.shards, addresses[index], spec.parties[index].engine)
    if spec.hide_membership:
        why = None
        if not task.hides_membership:
            why = (f"{type(task).__name__} does not offer it (the PCA, linear-regression and logistic-regression "
                   f"jobs do)")
        if why is not None:
            raise UsageError(f"job file {spec.path or '(unnamed)'} asks to hide membership (\"hide_membership\"): "
                             f"{why}")
    return JobParty(index, spec.parties[index].file, spec.id_column, task, spec.dataset_id, ledger, bounds,
                    spec.drop_columns, spec.min_intersection, shards, spec.hide_membership,
                    check_max_set_ratio(max_set_ratio), spec.alignment_keys)


def task_bounds(spec: JobSpec, task: JobTask) -> tuple:
    """Each client's declared column ranges: the job file's ``bounds`` and those the task declares itself
    (:meth:`JobTask.declared_ranges`, e.g. a regression label's range), one tuple per client."""
    extra = task.declared_ranges(spec.n_clients)
    return tuple(tuple(b) + tuple(extra.get(j, ())) for j, b in enumerate(spec.bounds, start=1))


def job_programs(spec: JobSpec, task: JobTask, ledger: LedgerGuard | None = None,
                 max_set_ratio: float = DEFAULT_MAX_SET_RATIO) -> list[JobParty]:
    """Every party's program of a job started on this machine (the server's with ``ledger``)."""
    return [party_program(spec, i, task, ledger if i == 0 else None, max_set_ratio) for i in range(len(spec.parties))]


CLIP_WARN_FRACTION = 0.01  # a client that clipped more than this fraction of its rows is warned


def clip_warning(index: int, counts: dict) -> str | None:
    """The WARNING for client ``index`` whose own counts (``clipped``, ``rows``) show more than
    :data:`CLIP_WARN_FRACTION` of its rows clipped, else None.  The count is data-dependent and not
    differentially private, so it stays with that client: only its own operator's output and JSON hold it
    (the server never receives it)."""
    clipped, rows = counts.get("clipped"), counts.get("rows")
    if not isinstance(clipped, int) or not isinstance(rows, int) or rows < 1 or clipped <= CLIP_WARN_FRACTION * rows:
        return None
    return (f"WARNING: client {index} clipped {clipped} of its {rows} rows ({100 * clipped / rows:.1f}%) to its "
            f"share of the row norm bound: the release is biased.  Declare public per-column ranges (\"bounds\": "
            f"{{\"column\": [lo, hi]}}) for this client in the job file so that it scales its columns (sqm pca "
            f"--propose-bounds FILE proposes some from its own data, for review), or raise the ranges")
