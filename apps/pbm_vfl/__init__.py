"""PBM-VFL (``sqm pbm-vfl``): split neural training with Poisson-Binomial-quantized embeddings.

Modules: :mod:`.party` the one party program (:class:`PBMVFLProgram`, what a party process imports),
:mod:`.config` the public configuration, :mod:`.privacy` each method's noise and privacy (PBM, the LDP
baselines), :mod:`.training` the job launcher (:func:`train_vfl`), :mod:`.estimator` the scikit-learn
classifier, :mod:`.data` the clients' column blocks, :mod:`.cli` the subcommand.  The estimator is imported on
first use (it imports scikit-learn, which a party process does not need)."""
from .cli import register, run
from .config import VFLConfig
from .data import load_split
from .party import PBMVFLProgram
from .training import train_vfl

__all__ = ["PBMVFLClassifier", "PBMVFLProgram", "VFLConfig", "load_split", "register", "run", "train_vfl"]


def __getattr__(name):
    if name == "PBMVFLClassifier":
        from .estimator import PBMVFLClassifier

        return PBMVFLClassifier
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
