"""BGW evaluation of a :class:`~sqm.mpc.protocols.program.SumProgram` over one party's transport.

The transport (:class:`sqm.mpc.net.transport.PartyTransport`: MPyC's channels in a party process, in-memory
mailboxes in a simulation) carries the messages; the heavy local share arithmetic is vectorized int64 numpy
(:mod:`sqm.mpc.shares.modarith`); the sharing steps are :mod:`sqm.mpc.protocols.sharing`'s.

Protocol, for M parties (party 0 the server, parties 1..n the clients) and threshold t = (M - 1) // 2:

1. every party checks that all others run the same public job (hash of the public parameters);
2. the clients check among themselves that they hold the same number of records (the server learns only
   whether the check passed);
3. each client Shamir-shares (degree t) its integer columns, chunk by chunk (:mod:`sqm.mpc.protocols.stream`), with the
   *workers*: the clients alone when they are at least 2t + 1 and the program has degree at most 2 (the server
   then receives no share of any record), else every party; the addends go with the last chunk;
4. each worker adds each chunk's moments to its running sums on shares, locally: column sums (degree t),
   sums of products of two columns by the inner-product trick (degree 2t, no communication whatever the
   record count), and higher degrees by elementwise products with one degree reduction per extra factor;
   no worker holds more than one chunk of shares;
5. each worker combines moments into the outputs with the public integer coefficients and adds the addend
   shares; if the outputs have degree 2t, one degree reduction (resharing, [GRR98], from the 2t + 1 or more
   workers' points) gives every party a degree-t share, so after the input phase only O(outputs) field
   elements per party travel;
6. every party sends its output shares to the server (and to the clients if asked), which reconstructs
   and decodes the signed result.  Nothing else is ever opened.

The evaluation's options are its constructor's arguments: this party's shard workers
(:class:`sqm.mpc.protocols.shards.ShardRunner`), the membership-hiding alignment's
(:class:`sqm.mpc.protocols.psi.Union`), a progress callback per chunk.
"""
from __future__ import annotations

import numpy as np

from sqm.mpc.protocols import addend_check
from sqm.mpc.protocols import compare
from sqm.mpc.protocols import proof_exchange
from sqm.mpc.protocols import sharing
from sqm.mpc.shares import modarith
from sqm.mpc.shares import shamir
from sqm.mpc.net import wire
from sqm.mpc.net.abort import InputRefused, ProtocolError
from sqm.errors import UsageError
from sqm.mpc.shares.field import from_signed, prime_for_bound, to_signed
from sqm.mpc.protocols.stream import ArrayInput, as_input, chunk_count, chunk_rows


class Evaluation:
    """Secure evaluations of jobs over ``transport`` (this party's :class:`sqm.mpc.net.transport.PartyTransport`).

    ``shards``: this party's shard workers (:class:`sqm.mpc.protocols.shards.ShardRunner`), or None: one process;
    ``membership``: the membership-hiding alignment (:class:`sqm.mpc.protocols.psi.Union`): records over the
    union, each counted times its secret membership; ``on_chunk``: an optional callback(chunks done, chunks due)
    of an evaluation in chunks (progress); ``row_limit``: a shard worker's evaluation's row limit (an
    evaluation of a whole job takes its own, :attr:`sqm.mpc.protocols.backend.Job.row_limit`)."""

    def __init__(self, transport, *, shards=None, membership=None, on_chunk=None, row_limit: int | None = None):
        self.tr = transport
        self.shards = shards
        self.membership = membership
        self.on_chunk = on_chunk if on_chunk is not None else self._chunk_progress
        self.row_limit = row_limit  # the evaluation's row limit, while it runs
        self.proofs: proof_exchange.InputProofs | None = None  # the clients' input proofs, while it runs
        self.addends: addend_check.AddendCheck | None = None  # the clients' verified addends, while it runs

    def _chunk_progress(self, done: int, due: int) -> None:
        """Without an ``on_chunk`` of its own, an evaluation's chunks are its transport's progress."""
        report = getattr(self.tr, "progress", None)
        if report is not None:
            report("secure evaluation", done, due)

    async def evaluate(self, job, my_input=None, outputs_to_clients: bool = False,
                       outputs_to=None) -> np.ndarray | None:
        """Securely evaluate ``job`` (a :class:`sqm.mpc.protocols.backend.Job` stripped of client programs).

        ``my_input`` is this client's :class:`sqm.mpc.protocols.stream.ChunkedInput` or
        ``(block, addend[, ids digest])``; None at the server.  The records go through in chunks of ``job.chunk_rows``
        (public; default :func:`sqm.mpc.protocols.stream.chunk_rows`): every party accumulates its shares of the moments
        chunk by chunk, so no party holds more than one chunk of shares, and the result is the same integers whatever
        the chunk size.  Returns the signed integer result (object array) at the receivers, None elsewhere: the server
        (and the clients, ``outputs_to_clients``), or the parties ``outputs_to`` names (e.g. one client alone).
        """
        prog = job.program
        bound = job.result_bound()
        p = prime_for_bound(bound, self.tr.M)
        col_bounds = [int(b) for b in job.col_bounds]
        owner = list(job.var_owner) if job.var_owner is not None else None
        n_rows = int(job.n_records)
        mask = self.membership
        positions = n_rows if mask is None else int(mask.size)  # the records the clients input (union: all)
        rows_per_chunk = int(chunk_rows(prog.n_vars) if job.chunk_rows is None else job.chunk_rows)
        if rows_per_chunk < 1:
            raise UsageError(f"a chunk holds at least one record, got {rows_per_chunk}")
        if prog.n_vars == 0 or positions == 0:
            rows_per_chunk = max(1, positions)  # nothing per record: one exchange
        await self.tr.agree((prog.n_vars, prog.n_out, prog.gram, prog.monomials, prog.rows.tobytes(),
                          prog.cols.tobytes(), tuple(int(c) for c in prog.coefs), col_bounds, owner,
                          n_rows, int(job.addend_bound), bool(job.align_ids), p, self.tr.M, self.tr.t, rows_per_chunk)
                         + ((("verify_sharing", True),) if getattr(job, "verify_sharing", False) else ())
                         + ((("shards", self.shards.public()),) if self.shards is not None else ())
                         + ((("hide_membership", positions),) if mask is not None else ())
                         + ((("row_limit", int(job.row_limit)),) if job.row_limit is not None else ())
                         + ((("input_limits", _limits(job.input_limits)),) if _proves(job) else ())
                         + ((("addend_law", repr(job.addend_law)),) if _law(job) is not None else ()))
        if mask is not None:
            self._check_membership(prog, n_rows)
        self.row_limit = None if job.row_limit is None else int(job.row_limit)
        if self.row_limit is not None:
            self._check_row_limit(prog)
        verify = bool(getattr(job, "verify_sharing", False))
        if verify and owner is None:
            raise ProtocolError(f"party {self.tr.pid}: checking the clients' sharings needs the job's column owners "
                                f"(var_owner); refused before any share was sent")
        if verify:
            sharing.require_checkable(self.tr)
        self.proofs = None
        if _proves(job):
            if owner is None or self.shards is not None:
                raise ProtocolError(f"party {self.tr.pid}: checking the clients' input proofs needs the job's column "
                                    f"owners (var_owner) and one process per party (no shard workers); refused "
                                    f"before any share was sent")
            self.proofs = proof_exchange.InputProofs(self.tr, p, job.claims())
        self.addends = None
        if _law(job) is not None:
            if self.shards is not None:
                raise ProtocolError(f"party {self.tr.pid}: checking the clients' addends needs one process per party "
                                    f"(no shard workers); refused before any share was sent")
            self.addends = addend_check.AddendCheck(self.tr, p, _law(job))
        if owner is not None and sorted(set(owner)) != list(range(self.tr.M - 1)) and prog.n_vars:
            raise ProtocolError(f"party {self.tr.pid}: the job's columns belong to clients "
                                f"{sorted(set(o + 1 for o in owner))} but {self.tr.M - 1} clients joined; refused "
                                f"before any share was sent")
        needs_count = any(len(m) == 0 for m in prog.monomials)
        self.tr.phase("agree")
        # ---- input phase ----
        feed = None
        if self.tr.is_server:
            await self.tr.check_clients(None, "record count", None)
            if job.align_ids:
                await self.tr.check_clients(None, "record ids", None)
        else:
            inp = as_input(my_input)
            mine = [j for j, o in enumerate(owner or []) if o == self.tr.pid - 1]
            feed = _Feed(inp, positions, None if owner is None else [col_bounds[j] for j in mine], prog.n_out,
                         needs_count, self.tr.pid == 1, count=None if mask is None else 0)
            problem = None  # this client's own input does not fit the public job: a short reason, no data
            if owner is not None and inp.n_cols != len(mine):
                problem = f"it holds {inp.n_cols} columns, the job expects {len(mine)}"
            elif inp.n_rows > positions:
                problem = f"it holds more records than the job's bound {positions}"
            else:
                problem = feed.check_in_memory()
            await self.tr.check_clients(int(inp.n_rows), "record count", wire.value(int, "a record count"),
                                     problem=problem)
            if job.align_ids:  # digests of the records' order (the record alignment's), among clients only
                await self.tr.check_clients(inp.ids_digest or b"", "record ids (different ids or a "
                                         "different order)", wire.one_of(wire.digest(32), wire.digest(0)))
            self.tr.phase("client checks")
        if self.addends is not None:  # each client's addend drawn from committed randomness and checked
            own = await self.addends.run()
            if feed is not None:  # the ideal functionality adds it in the clear; the protocol, the checked shares
                assert own is not None  # a client's
                feed.addend = own if getattr(self.tr, "ideal", False) else np.zeros_like(own)  # zeros: unused
        widths = None if owner is None else [owner.count(j) for j in range(self.tr.M - 1)]
        receivers = ([0] + (self.tr.clients if outputs_to_clients else []) if outputs_to is None
                     else sorted({int(r) for r in outputs_to}))
        if not receivers or not all(0 <= r < self.tr.M for r in receivers):
            raise UsageError(f"the result goes to parties 0..{self.tr.M - 1}, got {outputs_to!r}")
        res = await self._secure_outputs(prog, p, positions, rows_per_chunk, widths, needs_count, feed, receivers,
                                         verify)
        return None if res is None else to_signed(res, p).astype(object)

    async def _secure_outputs(self, prog, p: int, n_rows: int, rows_per_chunk: int, widths, needs_count: bool,
                              feed: _Feed | None, receivers, verify: bool = False):
        """BGW on the clients' chunks: share each chunk, add its moments (on shares) to the running sums; with
        the last chunk the clients also share their summands (addend; record count); combine, reduce the
        degree once, open to ``receivers`` (field elements there, None elsewhere).  ``feed``: this client's
        :class:`_Feed`, None at the server.  With shards (``self.shards``, :mod:`sqm.mpc.protocols.shards`) the
        records go through the parties' shard workers instead, and the summands in one exchange of their own.
        A transport that stands for the ideal functionality (an in-process simulation's, ``ideal``) computes the
        outputs itself (:meth:`sqm.mpc.protocols.inprocess.InProcessTransport.ideal_outputs`)."""
        if getattr(self.tr, "ideal", False):
            return await self.tr.ideal_outputs(self, prog, p, n_rows, rows_per_chunk, feed, receivers)
        summands = [(prog.n_out,)] + ([(1,)] if needs_count else [])
        workers = list(range(self.tr.M)) if verify or self.proofs is not None else self._workers(prog)
        if self.shards is not None:
            check = None
            if verify:  # the seeds in this session; every shard worker adds its chunks; verified here
                check = sharing.SharingCheck(self.tr, p, widths)
                await check.agree_seeds()
            moments = await self.shards.moments(self, prog, p, n_rows, rows_per_chunk, widths, feed, workers, check)
            payload = None  # the summands alone, with a block of no records
            if feed is not None:
                payload = [np.zeros((0, feed.inp.n_cols), np.int64)] + [from_signed(v, p) for v in feed.summands()]
                if check is not None:  # the client's mask for the check
                    payload.append(self.tr.rng.integers(0, p, size=1, dtype=np.int64))
            _, sums = await sharing.input_shares(self.tr, payload, p, widths, 0, summands, workers,
                                                 ((1,),) if check is not None else (), output=prog.degree < 2)
            self.tr.phase("exchange summands")
            if check is not None:  # before anything is reduced or opened
                check.add_masks(sums.pop())
                await check.verify()
                self.tr.phase("sharing check")
        else:
            moments, sums = await self._input_loop(prog, p, n_rows, rows_per_chunk, widths, feed, workers,
                                                   summands, verify, output=prog.degree < 2)
        y = None
        if self.tr.pid in workers:
            if moments is None:  # no record at all (a job of zero records): the moments are zero
                moments = np.zeros(prog.n_vars ** 2 if prog.gram else len(prog.monomials), dtype=np.int64)
            addend = sums[0]
            if self.addends is not None:  # the clients' checked addends; what their addend summands carry is ignored
                assert self.addends.total is not None  # the check ran before the input phase
                addend = self.addends.total
            y = modarith.add_mod(self._combine(prog, moments, sums[1] if needs_count else None, p), addend, p)
        if prog.degree >= 2:  # the moments have degree 2t: one reduction
            y = await sharing.reshare(self.tr, y, p, workers, (prog.n_out,), output=True)
            self.tr.phase("degree reduction")
            workers = list(range(self.tr.M))  # every party now holds a degree-t share
        res = await sharing.open_to(self.tr, y, p, receivers, workers, (prog.n_out,), degree=self.tr.t, output=True)
        self.tr.phase("open result")
        return res

    async def _input_loop(self, prog, p: int, n_rows: int, rows_per_chunk: int, widths, feed: _Feed | None,
                          workers, summands=(), verify: bool = False, check=None, chunk_base: int = 0,
                          output: bool = False):
        """The input phase: each chunk shared and its moments added to this worker's running sums (None at a
        party that is no worker); the summands (shapes ``summands``; none: not sent) go with the last chunk.
        Returns (moments, summand sums).  ``check``: a shard worker's part of the sharing
        check (seeds agreed by its party's session, which also verifies): its chunks are added to it, labelled
        ``chunk_base + k``.  ``output``: the last chunk's shares complete the outputs' inputs (a program
        without a degree reduction: :meth:`sqm.mpc.net.transport.PartyTransport.output_shares_next`)."""
        n_chunks = chunk_count(n_rows, rows_per_chunk)
        blocks = None if feed is None else feed.blocks(rows_per_chunk)
        moments = None
        sums: list = []
        own_check = check is None and verify
        if own_check:
            check = sharing.SharingCheck(self.tr, p, widths)
            await check.agree_seeds()
        for k in range(n_chunks):
            last = k == n_chunks - 1
            payload = block = None
            if feed is not None:
                assert blocks is not None  # a feed's blocks, made with it above
                block = next(blocks)
                # with input proofs a client's shares of its values are its witness's (proofs.push)
                payload = [from_signed(block, p) if self.proofs is None else np.zeros((block.shape[0], 0), np.int64)]
                if last and summands:
                    payload += [from_signed(v, p) for v in feed.summands()]
                    if own_check:  # the client's mask for the check: uniform, shared with the last chunk
                        payload.append(self.tr.rng.integers(0, p, size=1, dtype=np.int64))
            rows_k = min(rows_per_chunk, n_rows - k * rows_per_chunk) if n_rows else 0
            extra = ((1,),) if own_check and last else ()
            if self.proofs is None or last:  # with the proofs only the summands travel here (the last chunk)
                S, sums = await sharing.input_shares(self.tr, payload, p, widths if self.proofs is None else
                                                     [0] * len(widths), rows_k, summands if last else (), workers,
                                                     extra, output=output and last)
            if self.proofs is not None:  # the witness's values: computed on, opened only once every proof passed
                S = await self.proofs.push(block, rows_k)
                if self.membership is not None or self.row_limit is not None:  # their comparisons open values
                    await self.proofs.finish()  # masked for inputs within bounds: each chunk decided first
            if check is not None:
                check.add_chunk(chunk_base + k, S)
                if last and own_check:
                    check.add_masks(sums.pop())
            Y = bits = None
            if self.membership is not None or self.row_limit is not None:  # each record's row times its secret bit
                bits = await self._row_bits(S, k * rows_per_chunk, rows_k, p, workers)
                Y = await self._masked_rows(S, bits, rows_k, prog.n_vars, p, workers)
            if S is not None:
                m = await self._moments(prog, S, p, Y, bits)
                moments = m if moments is None else modarith.add_mod(moments, m, p)
            del S, payload, block
            self.tr.phase("local moments")
            if self.on_chunk is not None:
                self.on_chunk(k + 1, n_chunks)
        if self.proofs is not None:  # every chunk's proofs decided before any output is reduced or opened
            await self.proofs.finish()
        if own_check:  # before anything is reduced or opened
            await check.verify()
            self.tr.phase("sharing check")
        return moments, sums

    async def shard_moments(self, work) -> dict:
        """Inside shard worker ``work.shard``'s session (:mod:`sqm.mpc.protocols.shards`): its records' input phase, as
        :meth:`_input_loop` runs it for the whole job, without summands.  Returns this party's shares of the
        moments (None at a party that is no worker) and what its input part counted."""
        feed = None
        if work.part is not None:
            feed = _Feed(work.part, work.stop - work.start, work.bounds, work.n_out, False, False)
        check = None
        if work.seeds is not None:  # the sharing check: its seeds came from the party's own session
            check = sharing.SharingCheck(self.tr, work.p, work.widths)
            check.seeds = dict(work.seeds)
        moments, _ = await self._input_loop(work.program, work.p, work.stop - work.start, work.rows_per_chunk,
                                            work.widths, feed, work.workers, check=check,
                                            chunk_base=int(work.shard) << 32)
        return {"moments": moments, "counts": {} if feed is None else feed.inp.counts(),
                "lam": {} if check is None else {c: int(v) for c, v in check.lam.items()}}

    def _workers(self, prog) -> list[int]:
        """The parties that hold input shares and compute on them: the clients alone when they are at least
        2t + 1 (enough for the degree reduction of products) and the program has degree at most 2; else every
        party.  The server then receives no input share at all, and computes nothing until the reduction."""
        if len(self.tr.clients) >= 2 * self.tr.t + 1 and prog.degree <= 2:
            return list(self.tr.clients)
        return list(range(self.tr.M))

    def _check_membership(self, prog, n_rows: int) -> None:
        """What a membership-hiding evaluation needs (refused before any share otherwise).  The job's record count
        is a public bound on the members (the field is sized by it): a client, which is not told the intersection
        size, cannot check it; the server does."""
        mask = self.membership
        why = None
        if prog.degree > 2:
            why = "programs of degree 2 at most (one more multiplication by the membership)"
        elif self.tr.is_server and (mask.indicator is None or mask.indicator.shape != (int(mask.size),)):
            why = "the server's indicator of the intersection over the union"
        elif self.tr.is_server and int(mask.indicator.sum()) > n_rows:
            why = f"a record bound of at least the {int(mask.indicator.sum())} members, not {n_rows}"
        if why is not None:
            raise ProtocolError(f"party {self.tr.pid}: a membership-hiding evaluation needs {why}; refused before any "
                                f"share was sent")

    def _check_row_limit(self, prog) -> None:
        """What an evaluation with a row limit needs (refused before any share otherwise)."""
        why = None
        if prog.degree > 2:
            why = "programs of degree 2 at most (one more multiplication by each record's bit)"
        elif any(len(m) == 0 for m in prog.monomials):
            why = "programs without a constant monomial (the record count would count the records left out)"
        if why is not None:
            raise ProtocolError(f"party {self.tr.pid}: an evaluation with a row limit needs {why}; refused before any "
                                f"share was sent")

    async def _row_bits(self, S, start: int, rows: int, p: int, workers):
        """This worker's shares of each record's bit to keep (None at a party that is no worker): its
        membership of the intersection (:meth:`_membership_bits`), [sum_j x_ij^2 <= row_limit]
        (:func:`sqm.mpc.protocols.compare.row_norm_within`), or their product when the job has both."""
        bits = None
        if self.membership is not None:
            bits = await self._membership_bits(start, rows, p, workers)
        if self.row_limit is not None:
            within = await compare.row_norm_within(self.tr, S, self.row_limit, p, workers, rows)
            self.tr.phase("row limit (secure comparison)")
            bits = within if self.membership is None else await compare.mul(self.tr, bits, within, p, workers,
                                                                             (rows,))
        return bits

    async def _membership_bits(self, start: int, rows: int, p: int, workers):
        """Membership-hiding alignment (:mod:`sqm.mpc.protocols.psi`, ``hide_membership``): the server, which knows
        which positions of the union are in the intersection (never which ids), Shamir-shares the 0/1 indicator of this
        chunk's positions with the workers (their shares returned, None elsewhere)."""
        out = {}
        if self.tr.is_server:
            ind = self.membership.indicator[start:start + rows].astype(np.int64)
            shares = shamir.share(ind, self.tr.M, self.tr.t, p, self.tr.rng)
            out = {j: shares[j] for j in workers}
        got = await self.tr.send_recv(out, [0] if self.tr.pid in workers else [], wire.shares((rows,), p),
                                   "membership indicator")
        return got[0] if self.tr.pid in workers else None

    async def _masked_rows(self, S, bits, rows: int, width: int, p: int, workers):
        """Each worker multiplies its shares of every row by its share of the row's bit (degree 2t) and one degree
        reduction among the workers brings it back to degree t.  Returns this worker's shares of I * X (None at
        a party that is no worker); since I^2 = I, the moments of (I X)^T X are those of the kept records alone."""
        Y = await compare.mul(self.tr, S, None if bits is None else bits[:, None], p, workers, (rows, width))
        self.tr.phase("masking rows")
        return Y

    async def _moments(self, prog, S: np.ndarray, p: int, Y: np.ndarray | None = None,
                       bits: np.ndarray | None = None) -> np.ndarray:
        """This party's shares of the program's moments over the records of ``S`` (its shares of one chunk),
        mod p: vec(S^T S) for a Gram program; else one per monomial (0 for the constant monomial, whose sum
        is the record count, added by :meth:`_combine`).  Degree > 2 monomials take one degree reduction
        per extra factor.  With a monomial of degree >= 2 (``prog.degree >= 2``) the moments have degree 2t.
        ``Y``: the shares of the rows times their membership (:meth:`_masked_rows`), which then stand for each
        monomial's first factor (degree 2 at most)."""
        if Y is not None:
            return self._masked_moments(prog, Y, S, p, bits)
        if prog.gram:
            return modarith.gram_mod(S, p).reshape(-1)
        monos = prog.monomials
        moments = np.zeros(len(monos), dtype=np.int64)
        deg2 = [k for k, mono in enumerate(monos) if len(mono) == 2]
        if any(len(mono) == 1 for mono in monos):
            colsum = modarith.sum_mod(S, 0, p)
        if len(deg2) > S.shape[1]:
            G = modarith.gram_mod(S, p)
        high = [k for k, mono in enumerate(monos) if len(mono) > 2]
        prefix: dict[tuple, np.ndarray] = {}
        if high:  # elementwise products with degree reduction, one round per extra factor
            depth = max(len(monos[k]) for k in high)
            for level in range(2, depth):
                need = sorted({monos[k][:level] for k in high if len(monos[k]) > level})
                prods = []
                for pre in need:
                    base = S[:, pre[0]] if level == 2 else prefix[pre[:-1]]
                    prods.append(modarith.mul_mod(base, S[:, pre[level - 1]], p))
                if prods:
                    reduced = await sharing.reshare(self.tr, np.stack(prods), p)
                    assert reduced is not None  # every party receives (receivers: default, every party)
                    for pre, r in zip(need, reduced, strict=True):
                        prefix[pre] = r
        for k, mono in enumerate(monos):
            if len(mono) == 1:
                moments[k] = colsum[mono[0]]
            elif len(mono) == 2:
                a, b = mono
                moments[k] = G[a, b] if len(deg2) > S.shape[1] else \
                    modarith.sum_mod(modarith.mul_mod(S[:, a], S[:, b], p), 0, p)
            elif len(mono) > 2:
                moments[k] = modarith.sum_mod(modarith.mul_mod(prefix[mono[:-1]], S[:, mono[-1]], p), 0, p)
        return moments

    @staticmethod
    def _masked_moments(prog, Y: np.ndarray, S: np.ndarray, p: int, bits: np.ndarray | None = None) -> np.ndarray:
        """The moments over the members only: sum of y_a (degree 1) and of y_a x_b (degree 2), y = I x; the
        constant monomial's, the members' count: the sum of the bits I (membership hidden, no client knows it and
        client 1 contributes 0 to the count summand: :meth:`_combine` adds it)."""
        if prog.gram:
            return modarith.matmul_mod(np.ascontiguousarray(Y.T), S, p).reshape(-1)
        monos = prog.monomials
        moments = np.zeros(len(monos), dtype=np.int64)
        if any(len(mono) == 1 for mono in monos):
            colsum = modarith.sum_mod(Y, 0, p)
        if any(len(mono) == 2 for mono in monos):
            G = modarith.matmul_mod(np.ascontiguousarray(Y.T), S, p)
        for k, mono in enumerate(monos):
            if len(mono) == 0 and bits is not None:
                moments[k] = modarith.sum_mod(bits, 0, p)
            elif len(mono) == 1:
                moments[k] = colsum[mono[0]]
            elif len(mono) == 2:
                moments[k] = G[mono[0], mono[1]]
        return moments

    @staticmethod
    def _combine(prog, moments: np.ndarray, count, p: int) -> np.ndarray:
        """The outputs' shares from the moments' (the constant monomial's moment plus the shared count: 0 plus
        client 1's record count, or with membership hidden the members' bits summed plus client 1's 0)."""
        if prog.gram:
            return moments
        moments = moments.copy()
        for k, mono in enumerate(prog.monomials):
            if len(mono) == 0:
                moments[k] = (int(moments[k]) + int(count[0])) % p
        coefs = from_signed(prog.coefs.astype(object), p)
        terms = modarith.mul_mod(coefs, moments[prog.cols], p)
        return _segment_sum_mod(terms, prog.rows, prog.n_out, p)


class _Feed:
    """A client's input to one evaluation, checked against the public job: its records in chunks, padded with
    zero records up to the job's record bound, each chunk checked (int64, its columns, inside the public
    column bounds) before any share of it is made; then its summands (addend; the record count, which
    client 1 alone contributes).  A stream that breaks its own declared counts is this client's bad input
    (:class:`InputRefused`)."""

    def __init__(self, inp, n_rows: int, bounds, n_out: int, needs_count: bool, first_client: bool,
                 count: int | None = None):
        self.inp, self.n_rows, self.n_out = inp, int(n_rows), int(n_out)
        self.count = count  # the record count client 1 contributes (None: its own rows; membership hiding: m)
        self.needs_count, self.first_client = needs_count, first_client
        self.bounds = None if bounds is None else np.array(bounds, dtype=np.int64)
        self.checked_whole = False  # a block in memory, checked whole: its chunks need no second bounds check
        self.addend: np.ndarray | None = None  # a verified addend (addend_check) in place of the input's own

    def check_in_memory(self) -> str | None:
        """A block held in memory is checked whole before anything is sent (a short reason, or None)."""
        if not isinstance(self.inp, ArrayInput):
            return None
        block, addend = self.inp.block, np.asarray(self.inp.addend())
        if block.size and self.bounds is not None and np.any(np.abs(block) > self.bounds):
            return "its integer data exceeds the public column bounds"
        if addend.shape != (self.n_out,):
            return f"its addend has shape {addend.shape}, the job expects ({self.n_out},)"
        self.checked_whole = True
        return None

    def _checked(self, chunk, want: int) -> np.ndarray:
        chunk = np.asarray(chunk)
        if chunk.ndim != 2 or chunk.shape != (want, self.inp.n_cols):
            raise InputRefused(f"its input produced a chunk of shape {chunk.shape} where ({want}, "
                               f"{self.inp.n_cols}) was due")
        if chunk.size and not np.issubdtype(chunk.dtype, np.integer):
            raise InputRefused("its input produced non-integer values")
        if chunk.size and self.bounds is not None and not self.checked_whole and np.any(np.abs(chunk) > self.bounds):
            raise InputRefused("its integer data exceeds the public column bounds")
        return chunk.astype(np.int64, copy=False)

    def blocks(self, rows: int):
        """Chunks of ``rows`` records (the last: what is left of the bound), zero records after this client's."""
        own = self.inp.n_rows
        source = iter(self.inp.chunks(rows))
        for s in range(0, max(self.n_rows, 1), rows):
            want = min(rows, self.n_rows - s) if self.n_rows else 0
            mine = max(0, min(want, own - s))
            block = self._checked(next(source, np.zeros((0, self.inp.n_cols), np.int64)), mine) if mine else \
                np.zeros((0, self.inp.n_cols), np.int64)
            if mine == want:
                yield block
            else:
                padded = np.zeros((want, self.inp.n_cols), dtype=np.int64)
                padded[:mine] = block
                yield padded
        if next(source, None) is not None:
            raise InputRefused(f"its input produced more than the {own} records it declared")

    def summands(self) -> list:
        """[addend] (plus, where the program has a constant monomial, the record count: client 1's, 0 at the
        others) as object arrays of signed integers."""
        addend = np.asarray(self.inp.addend() if self.addend is None else self.addend)
        if addend.shape != (self.n_out,):
            raise InputRefused(f"its addend has shape {addend.shape}, the job expects ({self.n_out},)")
        out = [addend.astype(object)]
        if self.needs_count:
            mine = self.inp.n_rows if self.count is None else self.count
            out.append(np.array([mine if self.first_client else 0], dtype=object))
        return out


def _segment_sum_mod(values: np.ndarray, rows: np.ndarray, n: int, p: int) -> np.ndarray:
    """out[r] = sum of values[rows == r] mod p, exact (31-bit halves accumulate without overflow)."""
    lo = values & ((1 << 31) - 1)
    hi = values >> 31
    acc_lo = np.zeros(n, dtype=np.int64)
    acc_hi = np.zeros(n, dtype=np.int64)
    np.add.at(acc_lo, rows, lo)
    np.add.at(acc_hi, rows, hi)
    return modarith.add_mod(acc_lo % p, modarith.scalar_mul_mod(acc_hi % p, 1 << 31, p), p)


def _proves(job) -> bool:
    return getattr(job, "input_limits", None) is not None


def _law(job):
    return getattr(job, "addend_law", None)


def _limits(limits) -> tuple:
    """The job's input limits as a public description (agreed by every party)."""
    return tuple((tuple(int(j) for j in cols), int(lim)) for cols, lim in limits)
