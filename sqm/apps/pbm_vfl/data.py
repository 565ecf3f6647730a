"""PBM-VFL's data: a dataset's train/test split cut into the clients' column blocks."""
from __future__ import annotations

import numpy as np

from sqm.data.datasets import load_dataset
from sqm.mechanism.vertical import VerticalData
from sqm.errors import UsageError


def digits_quadrants(X: np.ndarray) -> list[np.ndarray]:
    """The 8x8 digits images cut into 4 quadrants of 16 pixels (one per party)."""
    img = np.asarray(X).reshape(-1, 8, 8)
    return [np.ascontiguousarray(img[:, r:r + 4, c:c + 4].reshape(-1, 16)) for r in (0, 4) for c in (0, 4)]


def load_split(dataset: str, parties: int, data_path: str | None = None, test_fraction: float = 0.2,
               split_seed: int = 0):
    """(blocks_train, blocks_test, y_train, y_test, n_classes) for 'digits' (pixels scaled to [0, 1]; with 4
    parties the image quadrants) or 'phishing' (:func:`sqm.data.datasets.load_dataset`, a stratified split)."""
    if dataset not in ("digits", "phishing"):
        raise UsageError(f"unknown dataset {dataset!r}; choose 'digits' or 'phishing'")
    Xtr, ytr, Xte, yte = load_dataset(dataset, data_path).train_test(test_fraction, split_seed)
    if dataset == "digits":
        Xtr, Xte = Xtr / 16.0, Xte / 16.0

    def blocks(X):
        return digits_quadrants(X) if dataset == "digits" and parties == 4 else VerticalData.split(X, parties).blocks

    ytr, yte = np.asarray(ytr, dtype=np.int64), np.asarray(yte, dtype=np.int64)
    return blocks(Xtr), blocks(Xte), ytr, yte, int(max(ytr.max(), yte.max())) + 1

