"""``sqm pbm-vfl``'s default torch models: a client's 3-layer MLP, the server's linear fusion layer, the
optimizer, each initialised from the party's own seed (:func:`.seeds.model_seed`).  A user of
:class:`sqm.apps.pbm_vfl.PBMVFL` brings any ``nn.Module`` instead."""
from __future__ import annotations

import torch
from torch import nn

from sqm.apps.pbm_vfl.config import VFLConfig
from sqm.apps.pbm_vfl.seeds import model_seed


class Scale(nn.Module):
    """Multiplies by a constant: the default party model's tanh output, scaled to [-C, C]."""

    def __init__(self, c: float):
        super().__init__()
        self.c = float(c)

    def forward(self, x):
        return x * self.c


def default_client_model(cfg: VFLConfig, in_dim: int, seed) -> nn.Module:
    """A 3-layer MLP (width ``cfg.hidden``) ending in tanh (times C when C != 1), initialised from ``seed``."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(model_seed(seed))
        layers = [nn.Linear(in_dim, cfg.hidden), nn.ReLU(), nn.Linear(cfg.hidden, cfg.hidden), nn.ReLU(),
                  nn.Linear(cfg.hidden, cfg.embedding_size), nn.Tanh()]
    if cfg.C != 1:
        layers.append(Scale(cfg.C))
    return nn.Sequential(*layers)


def default_fusion_model(cfg: VFLConfig, seed) -> nn.Module:
    """A linear layer from the embedding sum to the ``cfg.n_classes`` class scores, initialised from ``seed``."""
    assert cfg.n_classes is not None  # a server's config names its classes (a job derives them from its labels)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(model_seed(seed))
        return nn.Linear(cfg.embedding_size, cfg.n_classes)


def default_optimizer(cfg: VFLConfig, params) -> torch.optim.Optimizer:
    """``cfg.optimizer`` ('adam' or 'sgd') at learning rate ``cfg.lr``."""
    if cfg.optimizer == "adam":
        return torch.optim.Adam(params, lr=cfg.lr)
    return torch.optim.SGD(params, lr=cfg.lr)
