"""A client's release as a ``torch.autograd.Function``: clip, PBM-encode on the embeddings' device, and the
gradient that comes back from the server.

Split training crosses parties between the forward and the backward pass.  A client's forward is
:class:`PBMRelease`: it clips its embedding to [-C, C], PBM-encodes it where it lies (:func:`sqm.mechanism.pbm.encode`,
coins from the party's AES-CTR stream, a GPU included) and returns the integers ``q`` that go to the secure sum,
and ``h``, this client's decoded contribution C / (beta b) (q - b / 2).  The server decodes the secure sum,
which is the sum of the clients' ``h`` (decoding is linear), as a leaf tensor, and back-propagates its loss to
it.  The gradient with respect to the sum is what it sends every client (Algorithm 1: d sum / d h_m is the
identity), and the client feeds it to ``h.backward``.  Backward is straight through the sampling (E[h] =
clip(x)) and zero where the embedding was clipped (the derivative of the clip).

The secure sum itself runs on the party's event loop (:class:`sqm.apps.pbm_vfl.sum_exchange.SumExchange`). An autograd
Function is synchronous, so the party program awaits the sum between ``forward`` and ``backward``.  For the baselines
(NPQ, LDP), :func:`release` clips with ``torch.clamp``, which has the same gradient.
"""
from __future__ import annotations

import torch

from sqm.mechanism import pbm
from sqm.errors import UsageError


class PBMRelease(torch.autograd.Function):
    """``h, q = PBMRelease.apply(embedding, b, beta, C, rng)``. ``q``: int64 integers in [0, b] on the embedding's
    device (not differentiable). ``h``: the decoded contribution, in the embedding's dtype, whose gradient passes
    to the embedding where |embedding| <= C.  ``rng``: the party's AES-CTR generator (:mod:`sqm.mechanism.rng`)."""

    @staticmethod
    def forward(ctx, embedding, b, beta, C, rng):
        enc = pbm.encode(embedding, b, beta, C, rng)
        ctx.save_for_backward(embedding.detach().abs() <= C)
        h = pbm.decode(enc.q, b, beta, 1, C).to(embedding.dtype)
        ctx.mark_non_differentiable(enc.q)
        return h, enc.q

    @staticmethod
    def backward(ctx, grad_h, grad_q):
        (inside,) = ctx.saved_tensors
        return grad_h * inside, None, None, None, None


def release(embedding, method: str, b: int, beta: float, C: float, rng, sigma: float = 0.0):
    """This client's release of ``embedding`` (rows, P) under ``method``: (h, message, clipped).

    ``h`` is differentiable (``h.backward(grad_sum)`` is the client's backward pass).  ``message`` is what leaves
    the party, on the host: PBM's integers for the secure sum, or for NPQ and LDP the clipped embedding as
    float64, plus N(0, sigma^2) noise from ``rng`` for LDP.  NaN or infinite embeddings raise UsageError."""
    if not bool(torch.isfinite(embedding.detach()).all()):
        raise UsageError("a party model produced NaN or infinite embeddings")
    clipped = int((embedding.detach().abs() > C).sum())
    if method == "pbm":
        h, q = PBMRelease.apply(embedding, b, beta, C, rng)
        return h, q.cpu().numpy(), clipped
    h = embedding.clamp(-C, C)
    message = h.detach().to("cpu", torch.float64).numpy()
    if sigma > 0:
        message = message + rng.normal(0.0, sigma, size=message.shape)
    return h, message, clipped
