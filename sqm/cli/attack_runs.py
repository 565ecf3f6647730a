"""The attacks ``sqm audit --attack`` runs: what an informed adversary rebuilds from a release, and what a PBM-VFL
client learns about the server's labels.

Reconstruction (:func:`reconstruction`; the informed adversary of Balle, Cherubin and Hayes 2022, "Reconstructing
training data with informed adversaries"): the adversary knows every record but the target and receives SQM-PCA's
released Gram (the real release, :func:`sqm.apps.pca.utility.covariance_release`, in-process simulation).  It
subtracts the known records' Gram, leaving x x^T plus noise, and takes the top eigenvector scaled by the root of
its eigenvalue: the least-squares rank-one fit, x up to its sign.  Reported: the relative error
min(||x_hat - x||, ||x_hat + x||) / ||x|| over runs and the share of runs below 1/2, against the error 1 of
guessing zero (the adversary's prior is the records' unit ball), with and without the mechanism's noise.

Label inference (:func:`label_inference`; the passive attacks of Li et al. 2022, "Label leakage and protection in
two-party split learning"): a PBM-VFL client receives, every iteration, the gradient of the server's loss with
respect to each record's embedding sum (:mod:`sqm.apps.pbm_vfl.party`, step 3).  With the default fusion (a
linear layer and cross-entropy) on two classes that gradient is W^T (p - e_y) / B: for every record it lies along
+-(W_0 - W_1), its sign the label's.  The attack scores each record by its gradient's projection on the top
singular direction of all the gradients it received in its first epoch; the AUC against the true labels is
reported up to the global sign (one known label fixes it).  PBM's noise protects the embeddings, not the
labels: no mechanism of this project is applied to the gradients.
"""
from __future__ import annotations

import contextlib

import numpy as np


def _rank_one(R: np.ndarray) -> np.ndarray:
    """The least-squares rank-one fit x x^T of the symmetric part of ``R``: sqrt(lambda_max) times its eigenvector."""
    w, V = np.linalg.eigh((R + R.T) / 2.0)
    return np.sqrt(max(float(w[-1]), 0.0)) * V[:, -1]


def reconstruction(epsilon: float, delta: float, gamma: float, n_records: int, runs: int, seed=None,
                   noise: bool = True, d: int = 4) -> dict:
    """The informed adversary against SQM-PCA's Gram (module docstring): ``runs`` targets, each a fresh data set of
    ``n_records`` records, 2 clients of d/2 columns each holding sub-rows within its share 1/sqrt(2) of the unit
    ball (the target's at it); ``noise=False``:
    the same release with the noise parameter mu 1e-6 (quantization only, in practice)."""
    from sqm.apps.pca.utility import covariance_release
    from sqm.mechanism.rng import make_rng, spawn_seeds
    from sqm.mechanism.vertical import VerticalData

    errors = []
    report = None
    for s in spawn_seeds(seed, runs):
        s_data, s_release = s.spawn(2)
        rng = make_rng(s_data)
        halves = []
        for _ in range(2):  # each client's sub-row within its share of the unit ball, as the release clips it
            H = rng.standard_normal((n_records, d // 2))
            H *= rng.uniform(0, 1, (n_records, 1)) * np.sqrt(0.5) / np.linalg.norm(H, axis=1, keepdims=True)
            H[-1] *= np.sqrt(0.5) / np.linalg.norm(H[-1])  # the target's, at the bound
            halves.append(H)
        X = np.hstack(halves)
        mech = covariance_release(d, gamma=gamma, epsilon=epsilon, delta=delta, backend="plain", seed=s_release)
        if not noise:
            mech.mu = 1e-6  # Skellam of variance 2e-6: no noise in practice (mu must be positive)
        data = VerticalData([X[:, :d // 2], X[:, d // 2:]])
        res = mech.run(data)
        report = res.report
        known = X[:-1].T @ X[:-1]
        x_hat = _rank_one(np.asarray(res.estimate, np.float64).reshape(d, d) - known)
        x = X[-1]
        errors.append(min(np.linalg.norm(x_hat - x), np.linalg.norm(x_hat + x)) / np.linalg.norm(x))
    e = np.asarray(errors)
    assert report is not None  # runs >= 1
    return {"attack": "reconstruction", "release": "pca (Gram)", "noise": bool(noise), "runs": int(runs),
            "records": int(n_records), "d": int(d), "epsilon": float(report.epsilon_server) if noise else float("inf"),
            "relative_error_mean": float(e.mean()), "relative_error_median": float(np.median(e)),
            "success_rate": float(np.mean(e < 0.5)), "prior_error": 1.0}


@contextlib.contextmanager
def _recording_clients(store: list):
    """Record (the client, its batch's record indices, the gradient it received) at every training step of the
    PBM-VFL clients of this process (the in-process simulation runs every party here)."""
    from sqm.apps.pbm_vfl.party import ClientParty

    message, backward = ClientParty.message, ClientParty.backward

    def rec_message(self, split, idx, epoch, step, train=True):
        if train:
            self._attack_batch = (np.asarray(idx), epoch)
        return message(self, split, idx, epoch, step, train)

    def rec_backward(self, grad):
        idx, epoch = self._attack_batch
        store.append((id(self), idx, epoch, np.asarray(grad, np.float64).copy()))
        return backward(self, grad)

    ClientParty.message, ClientParty.backward = rec_message, rec_backward  # type: ignore[method-assign]
    try:
        yield
    finally:
        ClientParty.message, ClientParty.backward = message, backward  # type: ignore[method-assign]


def label_inference(method: str = "pbm", dataset: str = "phishing", parties: int = 5, epochs: int = 1,
                    seed: int = 0) -> dict:
    """Train PBM-VFL (``method``: "pbm", or "npq" for the unprotected reference) on ``dataset`` in process at
    ``sqm pbm-vfl``'s defaults and score every training record from the gradients one client received in the
    first epoch (module docstring): {auc, records, ...}."""
    from sqm.apps.logreg.baselines import roc_auc
    from sqm.apps.pbm_vfl import VFLConfig, load_split, train_vfl
    from sqm.apps.pbm_vfl.experiment import method_seed

    btr, bte, ytr, yte, nc = load_split(dataset, parties)
    cfg = VFLConfig(method=method, epochs=epochs, n_classes=nc)
    store: list = []
    with _recording_clients(store):
        train_vfl(btr, bte, ytr, yte, cfg, "plain", seed=method_seed(seed, method))
    first, epoch = store[0][0], min(e for _, _, e, _ in store)
    idx = np.concatenate([i for c, i, e, _ in store if c == first and e == epoch])
    G = np.vstack([g for c, _, e, g in store if c == first and e == epoch])
    G /= np.maximum(np.linalg.norm(G, axis=1, keepdims=True), 1e-300)  # directions: each batch's scale apart
    v = np.linalg.svd(G, full_matrices=False)[2][0]
    auc = roc_auc(np.asarray(ytr)[idx] == np.max(ytr), G @ v)
    return {"attack": "label-inference", "method": method, "dataset": dataset, "parties": parties,
            "records": int(len(idx)), "auc": float(max(auc, 1.0 - auc)), "auc_signed": float(auc)}
