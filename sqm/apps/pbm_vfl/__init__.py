"""PBM-VFL (``sqm pbm-vfl``): split neural training with Poisson-Binomial-quantized embeddings.

Modules: :mod:`.trainer` the torch library (:class:`PBMVFL`, :class:`Client`, :class:`Server`: a user's own
``nn.Module`` per client, a fusion model and loss at the server, save and resume), :mod:`.encoding` a client's
release as a ``torch.autograd.Function``, :mod:`.modules` ``sqm pbm-vfl``'s default models, :mod:`.party` the one
party program (:class:`PBMVFLProgram`, what a party process imports),
:mod:`.config` the public configuration, :mod:`.privacy` each method's noise and privacy (PBM, the LDP
baselines), :mod:`.training` the job launcher (:func:`train_vfl`), :mod:`.estimator` the scikit-learn
classifier, :mod:`.data` the clients' column blocks, :mod:`.cli` the subcommand.  Every name is imported on
first use: the estimator imports scikit-learn, which a party process does not need, and ``sqm --help`` (which
imports this package to register the command) imports none of numpy, torch or the runtime."""
import importlib

_LAZY = {"PBMVFLClassifier": "estimator", "PBMVFLProgram": "party", "VFLConfig": "config", "load_split": "data",
         "train_vfl": "training", "PBMVFL": "trainer", "Client": "trainer",
         "Server": "trainer"}

__all__ = sorted(_LAZY)


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
