"""The task of a scoring job (:mod:`sqm.framework.spec`): a released model's scores of new records whose
features are split across the clients, learned by one requesting party only.

1. The server holds the released model (:class:`sqm.apps.inference.model.ReleasedModel`, from its own
   ``--model`` file) and sends it to every client: the model is the training job's differentially private
   release, so holding it is post-processing and spends nothing.
2. Each client checks the model before sending anything of its records.  It must be a release the client
   recorded: its digest (:func:`sqm.framework.released_models.model_digest`) must be that of a completed training
   entry of its own ledger (the server sent every client the model at that job's end); a client that keeps a
   ledger refuses any other model (a crafted one, e.g. the identity), naming the reason.  And its scores, with
   what the requester holds, must not determine any of the client's columns
   (:func:`sqm.apps.inference.disclosure.determined_columns`, over this model and every model the client's
   file was scored with before for the same requester), unless its operator allows it (``allow_revealing``,
   ``sqm score --allow-revealing-scores``).
3. Each client scores its own columns of each record (the records all clients hold, aligned by the private set
   intersection, in the job's canonical order; a column with a declared range clamped to it, as when training):
   a partial score per output, in fixed point
   (``round(s * 2^frac_bits)``, each at most the public ``score_bound`` in absolute value).
4. The partial scores are summed on Shamir shares (:meth:`sqm.mpc.protocols.evaluation.Evaluation.evaluate` of a
   secure-sum job) and opened to the requester alone, which adds the intercepts.

What each party learns: the requester the scores of the aligned records (a client also knows which of its
records they are); every other party nothing but shares, the model and the public counts.  The scores reveal,
by design, per record, ``x_rest W_rest``: a linear combination of the other owners' columns per output (a
regression: one number per record; a projection: one per component); they are not differentially private for
the scored records.  The training data's budget is not charged (``charges = False``): the model is already
released.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from sqm.framework import released_models
from sqm.framework.jobtask import JobTask
from sqm.apps.inference.disclosure import determined_columns
from sqm.apps.inference.model import ReleasedModel
from sqm.errors import UsageError
from sqm.mpc.net.party import InputRefused, ProtocolError
from sqm.mpc.net.party import messages as wire
from sqm.mpc.protocols.secure_sum import sum_job

FRAC_BITS = 20  # fixed point of the partial scores: a resolution of 2^-20 (about 1e-6)
SCORE_BOUND = 1e9  # public bound on a client's partial score


def encode_partial(partial: np.ndarray, score_bound: float, frac_bits: int) -> tuple[np.ndarray | None, str | None]:
    """(the partial scores in fixed point, ``round(s * 2^frac_bits)`` as int64, None) or (None, the reason they
    cannot be: not finite, or over the public bound ``score_bound``)."""
    partial = np.asarray(partial, dtype=np.float64)
    if not np.all(np.isfinite(partial)):
        return None, "its values give non-finite partial scores"
    if partial.size and np.abs(partial).max() > score_bound:
        return None, f"a partial score exceeds the public bound {score_bound:g} (score_bound)"
    return np.rint(partial * (1 << int(frac_bits))).astype(np.int64), None


def sum_bound(n_clients: int, score_bound: float, frac_bits: int) -> int:
    """The public bound on the fixed-point sum of ``n_clients`` partial scores."""
    return int(n_clients) * int(math.ceil(score_bound * (1 << int(frac_bits))))


class ScoringJobTask(JobTask):
    """Score new records with a released model; ``model`` at the server (None at a client: the server sends
    it); ``requester``: the party that learns the scores (default: the last client).  A client's own choices
    (not public): ``allow_revealing``, its operator allows scores that determine some of its columns;
    ``need_record``, it refuses when it keeps no ledger to check the model against (a client started alone)."""

    charges = False  # a released model's scores charge no privacy budget of the training data
    clamp_only = True  # a client clamps a declared column to its range, as when training; the model is in raw units

    def with_party_bounds(self, party_bounds) -> ScoringJobTask:
        """Norm shares scale training data; scores use the raw columns: nothing to change."""
        return self

    def __init__(self, model: ReleasedModel | None = None, requester: int | None = None,
                 score_bound: float = SCORE_BOUND, frac_bits: int = FRAC_BITS, allow_revealing: bool = False,
                 need_record: bool = False):
        if not (isinstance(score_bound, (int, float)) and math.isfinite(score_bound) and score_bound > 0):
            raise UsageError(f"score_bound must be a finite number > 0, got {score_bound!r}")
        if not (isinstance(frac_bits, int) and 0 <= frac_bits <= 30):
            raise UsageError(f"frac_bits must be an integer in [0, 30], got {frac_bits!r}")
        if requester is not None and (not isinstance(requester, int) or requester < 0):
            raise UsageError(f"the requester is a party index (0 the server, 1.. the clients), got {requester!r}")
        self.model, self.requester = model, requester
        self.score_bound, self.frac_bits = float(score_bound), int(frac_bits)
        self.allow_revealing, self.need_record = bool(allow_revealing), bool(need_record)
        self.ledger = None  # this client's own ledger guard (with_ledger), its dataset resolved

    def with_ledger(self, ledger) -> ScoringJobTask:
        import copy

        task = copy.copy(self)
        task.ledger = ledger
        return task

    def public(self):
        return ("score", self.requester, self.score_bound, self.frac_bits)

    def summary(self) -> str:
        who = "the last client" if self.requester is None else f"party {self.requester}"
        return f"scores of a released model, learned by {who} alone (charges no privacy budget)"

    def release(self, meta):
        """Nothing is released of the training data (the model is): no privacy events."""
        return None

    def requester_of(self, meta) -> int:
        r = meta.n_parties if self.requester is None else self.requester
        if not 0 <= r <= meta.n_parties:  # public counts: every party refuses alike
            raise ProtocolError(f"the requester is party {r}, but the job has parties 0..{meta.n_parties}; refused")
        return r

    async def run(self, ctx, table, meta) -> dict:
        requester = self.requester_of(meta)
        if ctx.is_server and self.model is None:
            raise UsageError("the server of a scoring job needs the released model (--model FILE)")
        got = await ctx.broadcast(self.model.to_wire() if ctx.is_server and self.model is not None else None,
                                  wire.value(dict, "the released model", released_models.frame_ok),
                                  step="released model")
        model = self.model
        if not ctx.is_server:
            try:
                model = ReleasedModel.from_wire(got)
            except UsageError as e:  # a malformed message is a refusal naming its sender
                raise ProtocolError(f"client {ctx.pid}: the server's released model is malformed ({e}); refused "
                                    f"before any share was sent") from None
        assert model is not None  # the server's own (checked above) or the one it sent (read above)
        k, n = model.weights.shape[1], meta.n_records
        unit = 1 << self.frac_bits
        bound = sum_bound(meta.n_parties, self.score_bound, self.frac_bits) if n else 0
        my_input = None
        if ctx.is_server:
            if sum(meta.col_counts) != len(model.columns):  # every client column is in the model (each checks)
                raise ProtocolError(f"the clients hold {sum(meta.col_counts)} columns, the released model weighs "
                                    f"{len(model.columns)}: some model column is held by no client; refused "
                                    f"before any share was sent")
        else:
            at = {c: j for j, c in enumerate(model.columns)}
            missing = [c for c in table.columns if c not in at]
            if missing:
                raise InputRefused(f"its column(s) {missing} are not in the released model")
            self._check_model(ctx, model, meta, requester, [at[c] for c in table.columns])
            W = model.weights[[at[c] for c in table.columns]]
            enc, problem = encode_partial(np.asarray(table.block, dtype=np.float64) @ W,  # this client's columns
                                          self.score_bound, self.frac_bits)
            if problem:
                raise InputRefused(problem)
            assert enc is not None  # no problem: encoded
            my_input = (np.zeros((0, 0), np.int64), enc.reshape(-1), table.ids_digest)
        job = dataclasses.replace(sum_job([], n * k, bound), align_ids=True)
        if self.ledger is not None and not ctx.is_server:
            self.ledger.record_scoring(model.digest, requester)
        out = await ctx.evaluate(job, my_input, outputs_to=[requester])
        res = {"scored": int(n), "requester": requester, "outputs": model.outputs, "kind": model.kind,
               "model_digest": model.digest}
        if out is not None:
            scores = np.array([int(v) for v in out], dtype=np.float64).reshape(n, k) / unit + model.intercepts
            res["scores"] = scores
            if table is not None:
                res["ids"] = list(table.ids)  # this requester's own ids of the scored records
        return res

    def _check_model(self, ctx, model: ReleasedModel, meta, requester: int, own: list[int]) -> None:
        """This client's two checks before it sends anything of its records (ProtocolError naming the reason,
        for every peer): the model is a release its ledger recorded; the scores do not determine its columns."""
        digest = model.digest
        if self.ledger is None and self.need_record:
            raise ProtocolError("it keeps no ledger (--no-ledger), so it cannot check that the model is a "
                                "release it recorded; refused before any share was sent",
                                public="it keeps no ledger to check the model against")
        if self.ledger is not None:
            entry = self.ledger.released_model(digest)
            if entry is None:
                raise ProtocolError(f"the model (digest {digest[:16]}) is not a completed release in its ledger "
                                    f"{self.ledger.path or '(default)'}; refused before any share was sent",
                                    public=f"the model (digest {digest[:16]}) is not a release it recorded")
        if ctx.pid == requester or self.allow_revealing:
            return
        if len(meta.columns) != sum(meta.col_counts):  # the public schema names every client's columns
            raise ProtocolError("the job's column names are not known; refused before any share was sent")
        start = sum(meta.col_counts[:requester - 1]) if requester > 0 else 0
        theirs = set(meta.columns[start:start + meta.col_counts[requester - 1]]) if requester > 0 else set()
        rest = [j for j, c in enumerate(model.columns) if c not in theirs]
        weights = [model.weights]
        if self.ledger is not None:  # the models this file was scored with before for the same requester
            for text in self.ledger.scored_models(requester):
                m = released_models.from_json(text)
                rows = {c: i for i, c in enumerate(m["columns"])}
                weights.append(np.array([m["weights"][rows[c]] if c in rows else np.zeros(m["weights"].shape[1])
                                         for c in model.columns]))
        hit = determined_columns(np.hstack(weights), rest, [j for j in own if j in rest])
        if hit:
            names = [model.columns[j] for j in hit]
            why = (f"the scores{' (with those of earlier scorings)' if len(weights) > 1 else ''} and the requester's "
                   f"own columns determine its column(s) {names}")
            raise ProtocolError(f"{why}: the requester could solve for their values; refused before any share "
                                f"was sent (its operator may allow it: --allow-revealing-scores)",
                                public=why)
