"""One declaration per parameter (sqm.mechanism.params): each release's parameters are one frozen dataclass, and the
job task's public tuple, the estimator's defaults, the command line's options and the job file's task block keys
all come from it.  The public tuples are checked against the hand-written tuples they replace: the parties' job
agreement digests them, so a job that agrees today agrees the same way."""
from __future__ import annotations

import inspect
import math
import itertools
import pathlib
import re

import pytest

from sqm.mechanism.params import CHUNK_ROWS, ROBUST_NOISE, Boolean, Integer, Interval, Param
from sqm.apps.pca.params import PCAParams
from sqm.errors import UsageError

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _subcommand(name: str):
    from sqm.cli.command import build_parser

    return next(a for a in build_parser()._actions if a.dest == "command").choices[name]


def _legacy_pca_public(k, eps, delta, gamma, c, pb, chunk_rows, robust_noise, verify_sharing, row_norm_check):
    """``PCAJobTask.public`` as it was written by hand before the declaration."""
    pb = None if pb is None else tuple(float(b) for b in pb)
    chunk = () if chunk_rows is None else (("chunk_rows", int(chunk_rows)),)
    robust = () if not robust_noise else (("robust_noise", int(robust_noise)),)
    robust += (("verify_sharing", True),) if verify_sharing else ()
    robust += (("row_norm_check", True),) if row_norm_check else ()
    return ("pca", int(k), float(eps), float(delta), float(gamma), float(c), pb, *chunk, *robust)


@pytest.mark.parametrize("values", list(itertools.product(
    [2, 5], [0.5, 1], [1e-5], [1024.0, 4096], [1.0, 2], [None, (0.6, 0.8)], [None, 16], [0, 1], [False, True],
    [False, True])))
def test_the_pca_task_agrees_on_the_tuple_it_agreed_on_before(values):
    from sqm.apps.pca.job import PCAJobTask

    k, eps, delta, gamma, c, pb, chunk, robust, verify, check = values
    task = PCAJobTask(k, eps, delta, gamma, c, pb, chunk_rows=chunk, robust_noise=robust, verify_sharing=verify,
                      row_norm_check=check)
    assert task.public() == _legacy_pca_public(*values)
    assert task.with_party_bounds([0.5, 0.5]).public() == _legacy_pca_public(k, eps, delta, gamma, c, (0.5, 0.5),
                                                                             chunk, robust, verify, check)


@pytest.mark.parametrize("changes, message", [
    ({"n_components": 0}, "the number of components must be an integer >= 1, got 0"),
    ({"n_components": 2.5}, "the number of components must be an integer >= 1, got 2.5"),
    ({"robust_noise": 1.5}, r"robust_noise must be an integer >= 0 \(clients that may withhold noise\), got 1.5"),
    ({"robust_noise": True}, r"robust_noise must be an integer >= 0 \(clients that may withhold noise\), got True"),
    ({"chunk_rows": 0}, "chunk_rows must be an integer >= 1, got 0"),
    ({"epsilon": 0}, "epsilon must be a finite number > 0, got 0"),
    ({"delta": 1.5}, r"delta must lie in \(0, 1\), got 1.5"),
    ({"gamma": 0.5}, "gamma must be a finite number >= 1, got 0.5"),
    ({"row_norm_bound": -1.0}, "row_norm_bound must be > 0, got -1.0"),
    ({"verify_sharing": "yes"}, "verify_sharing must be true or false, got 'yes'"),
])
def test_every_declared_constraint_is_checked_naming_the_parameter(changes, message):
    with pytest.raises(UsageError, match=f"^{message}$"):
        PCAParams(**changes)
    from sqm.apps.pca import PCAJobTask, SQMPCA

    with pytest.raises(UsageError, match=f"^{message}$"):
        PCAJobTask(**changes)
    with pytest.raises(UsageError, match=f"^{message}$"):
        SQMPCA(**{"n_components": 1, **changes}, backend="plain").fit([[0.1, 0.2], [0.3, 0.1], [0.0, 0.2]])


def test_the_mechanism_checks_its_counts_with_the_same_declarations():
    from sqm.mechanism.polynomial import covariance
    from sqm.mechanism.release import SQM

    for kw, p in (({"robust_noise": -1}, ROBUST_NOISE), ({"chunk_rows": 2.5}, CHUNK_ROWS)):
        name, value = next(iter(kw.items()))
        with pytest.raises(UsageError) as err:
            SQM(covariance(2), 64.0, epsilon=1.0, **kw)
        with pytest.raises(UsageError) as same:
            p.check(value, name)
        assert str(err.value) == str(same.value)
    with pytest.raises(UsageError, match="^rounds must be an integer >= 1, got 0$"):
        SQM(covariance(2), 64.0, epsilon=1.0, rounds=0)
    assert Param(rule=Integer(1)).check(3.0, "n") == 3.0


def test_the_pca_estimator_takes_its_defaults_from_the_declaration():
    from sqm.apps.pca import SQMPCA

    sig = inspect.signature(SQMPCA.__init__).parameters
    for name, p in PCAParams.declared():
        assert sig[name].default == p.default, name
    est = SQMPCA(n_components=3, robust_noise=1)
    assert est.params() == PCAParams(n_components=3, robust_noise=1)
    assert set(PCAParams.names()) <= set(est.get_params())


def test_the_pca_command_and_task_block_come_from_the_declaration():
    p = _subcommand("pca")
    assert set(p.get_default("task_params")) == set(PCAParams.options())
    for dest, name in PCAParams.options().items():
        assert p.get_default(dest) == PCAParams.default(name), dest
    from sqm.cli.command import parse

    args = parse(["pca", "--components", "3", "--gamma", "1024", "--robust-noise", "1", "--row-norm-check"])
    assert PCAParams.from_options(args) == PCAParams(n_components=3, gamma=1024.0, robust_noise=1,
                                                     row_norm_check=True)



@pytest.mark.parametrize("values", list(itertools.product([0, 1.0, 2], [0.5, 1], [1e-5, 1e-6], [1024.0, 4096],
                                                          [1.0, 0.5], [1, 2.0], [False, True], ["label", "y"])))
def test_the_linreg_task_agrees_on_the_tuple_it_agreed_on_before(values):
    from sqm.apps.linreg import LinRegJobTask, SQMLinearRegression

    alpha, eps, delta, gamma, fb, lb, fit_intercept, label = values
    legacy = ("linreg", float(alpha), float(eps), float(delta), float(gamma), float(fb), float(lb),
              bool(fit_intercept), label)
    est = SQMLinearRegression(alpha, eps, delta, gamma, fb, lb, fit_intercept)
    # a job now declares its label's range, which every party agrees on too (tagged: after the others)
    assert LinRegJobTask(est, label, label_range=[-1, 2]).public() == (*legacy, ("label_range", (-1.0, 2.0)))


def test_the_linreg_estimator_command_and_task_block_come_from_the_declaration():
    from sqm.apps.linreg import SQMLinearRegression
    from sqm.apps.linreg.params import LinRegJobParams, LinRegParams

    sig = inspect.signature(SQMLinearRegression.__init__).parameters
    assert all(sig[name].default == p.default for name, p in LinRegParams.declared())
    p = _subcommand("linreg")
    assert set(p.get_default("task_params")) == set(LinRegJobParams.options())
    assert "fit_intercept" not in LinRegJobParams.options()  # no option: a job always fits the intercept
    for dest, name in LinRegJobParams.options().items():
        assert p.get_default(dest) == LinRegJobParams.default(name), dest
    with pytest.raises(UsageError, match="^alpha must be a finite number >= 0, got -1$"):
        SQMLinearRegression(alpha=-1, backend="plain").fit([[0.1, 0.2], [0.2, 0.1]], [0.1, 0.3])
    with pytest.raises(UsageError, match="^label_bound must be > 0, got 0$"):
        LinRegParams(label_bound=0)


def test_gamma_default_is_written_once():
    """The default quantization scale of the polynomial statistics is one declaration (sqm.mechanism.params)."""
    found = [f"{p.relative_to(ROOT)}:{i}" for p in (ROOT / "sqm").rglob("*.py")
             for i, line in enumerate(p.read_text().splitlines(), 1) if re.search(r"\b4096\.0\b", line)]
    assert found == ["sqm/mechanism/params.py:" + str(next(
        i for i, line in enumerate((ROOT / "sqm/mechanism/params.py").read_text().splitlines(), 1)
        if "4096.0" in line))], found


def _legacy_logreg_public(task):
    """``LRJobTask.public`` as it was written by hand before the declaration."""
    e = task.estimator

    def opt(v):
        return None if v is None else float(v)

    return ("sqm-logreg", float(e.epsilon), float(e.delta), float(e.gamma), opt(e.sampling_rate), e.epochs,
            opt(e.learning_rate), opt(e.weight_bound), task.label_column, task.label_party,
            bool(e.fit_intercept), float(e.intercept_scaling),
            None if e.party_bounds is None else tuple(float(b) for b in e.party_bounds), e.solver,
            int(e.robust_noise), bool(e.verify_sharing))


_SGD = [(None, None, None, None), (0.25, 2, 1.0, None), (0.5, 1, 2, 4)]


@pytest.mark.parametrize("values", [v for v in itertools.product(
    [0.5, 2], [1e-5], [1024.0, 8192], ["moments", "sgd"], range(3), ["label", "y"], [None, 1], [False, True],
    [1.0, 0.5], [0, 1], [False, True]) if not (v[3] == "sgd" and v[9] or v[3] == "moments" and v[4])])
def test_the_logreg_task_agrees_on_the_tuple_it_agreed_on_before(values):
    """Every solver (the moments solver has no schedule and sgd no robust noise: those are refused)."""
    from sqm.apps.logreg import LRJobTask
    from sqm.mpc.net.wire import encode

    eps, delta, gamma, solver, sched, label, party, no_intercept, scaling, robust, verify = values
    q, epochs, lr, w = _SGD[sched]
    task = LRJobTask(eps, delta, gamma, q, epochs, lr, w, label, party, fit_intercept=not no_intercept,
                     intercept_scaling=scaling, solver=solver, robust_noise=robust, verify_sharing=verify)
    for t in (task, task.with_party_bounds([0.6, 0.8])):
        assert t.public() == _legacy_logreg_public(t)
        assert encode(t.public()) == encode(_legacy_logreg_public(t))  # the agreement digest's bytes


@pytest.mark.parametrize("changes, message", [
    ({"sampling_rate": 0.0}, r"sampling rate q must lie in \(0, 1\], got 0.0"),
    ({"epochs": 0}, "epochs must be an integer >= 1, got 0"),
    ({"epochs": 1.5}, "epochs must be an integer >= 1, got 1.5"),
    ({"learning_rate": -1}, "learning_rate must be > 0, got -1"),
    ({"weight_bound": 0.0}, "weight_bound must be > 0, got 0.0"),
    ({"intercept_scaling": float("inf")}, "intercept_scaling must be > 0, got inf"),
    ({"gamma": 0.5}, "gamma must be a finite number >= 1, got 0.5"),
    ({"label_party": -1}, r"label_party must be an integer >= 0 \(a 0-based client index\), got -1"),
    ({"solver": "newton"}, "solver must be one of 'auto', 'moments', 'sgd', got 'newton'"),
    ({"robust_noise": 1.5}, r"robust_noise must be an integer >= 0 \(clients that may withhold noise\), got 1.5"),
    ({"base_rate": 1.0}, r"base rate p0 must lie in \(0, 1\), got 1.0"),
    ({"base_rate": 0}, r"base rate p0 must lie in \(0, 1\), got 0"),
])
def test_the_logreg_parameters_are_checked_by_their_declarations(changes, message):
    from sqm.apps.logreg import LRJobTask, SQMLogisticRegression
    from sqm.apps.logreg.params import LogRegParams

    with pytest.raises(UsageError, match=f"^{message}$"):
        LogRegParams(**changes)
    with pytest.raises(UsageError, match=f"^{message}$"):
        LRJobTask(**{"solver": "sgd", **changes})
    with pytest.raises(UsageError, match=f"^{message}$"):
        SQMLogisticRegression(**changes, backend="in-process").fit([[0.1, 0.2, 0.1], [0.3, 0.1, 0.2]], [0, 1])


def test_the_logreg_estimator_command_and_task_block_come_from_the_declaration():
    from sqm.apps.logreg import LRJobTask, SQMLogisticRegression
    from sqm.apps.logreg.params import LogRegJobParams, LogRegParams
    from sqm.cli.command import parse

    sig = inspect.signature(SQMLogisticRegression.__init__).parameters
    for name, p in LogRegParams.declared():
        assert sig[name].default == p.default, name
    assert LogRegJobParams.names()[:9] == ("epsilon", "delta", "gamma", "sampling_rate", "epochs", "learning_rate",
                                           "weight_bound", "label_column", "label_party")  # LRJobTask's positions
    p = _subcommand("logreg")
    assert set(p.get_default("task_params")) == {
        "epsilon", "delta", "gamma", "q", "epochs", "learning_rate", "weight_bound", "label_column", "label_party",
        "no_intercept", "solver", "robust_noise", "verify_sharing", "verify_inputs", "base_rate"} == set(
        LogRegJobParams.options())
    for dest, name in LogRegJobParams.options().items():
        p_ = dict(LogRegJobParams.declared())[name]
        assert p.get_default(dest) == (False if p_.negate else p_.default), dest
    args = parse(["logreg", "--q", "0.5", "--epochs", "2", "--no-intercept", "--solver", "sgd", "--label-party", "0"])
    params = LogRegJobParams.from_options(args)
    assert params == LogRegJobParams(sampling_rate=0.5, epochs=2, fit_intercept=False, solver="sgd", label_party=0)
    task = LRJobTask(params=params)
    assert task.public() == LRJobTask(1.0, q=0.5, epochs=2, fit_intercept=False, solver="sgd",
                                      label_party=0).public()
    assert task.estimator.get_params()["sampling_rate"] == 0.5 and task.label_party == 0
    # the base rate enters the agreed tuple only when set (tagged): the tuple without it is the one agreed before
    tagged = LRJobTask(params=LogRegJobParams.from_options(parse(["logreg", "--solver", "sgd", "--base-rate", "0.1"])))
    assert tagged.public() == LRJobTask(1.0, solver="sgd").public() + (("base_rate", 0.1),)
    assert tagged.estimator.get_params()["base_rate"] == 0.1


def _estimators():
    from sqm.apps.correlation.estimator import SQMCorrelation
    from sqm.apps.correlation.params import CorrelationParams
    from sqm.apps.linreg import SQMLinearRegression
    from sqm.apps.linreg.params import LinRegParams
    from sqm.apps.logreg import SQMLogisticRegression
    from sqm.apps.logreg.params import LogRegParams
    from sqm.apps.hdp_vfl.estimator import HDPLogisticRegression
    from sqm.apps.hdp_vfl.params import HDPParams
    from sqm.apps.pca import SQMPCA
    from sqm.apps.pbm_vfl.config import PBMJobParams, VFLConfig
    from sqm.apps.pbm_vfl.estimator import ESTIMATED, PBMVFLClassifier

    pbm = [(n, p) for n, p in VFLConfig.declared() if n in ESTIMATED] + [
        (n, p) for n, p in PBMJobParams.declared() if n == "secure_sum"]
    return [(SQMPCA, PCAParams.declared()), (SQMLinearRegression, LinRegParams.declared()),
            (SQMCorrelation, CorrelationParams.declared()), (SQMLogisticRegression, LogRegParams.declared()),
            (HDPLogisticRegression, HDPParams.declared()), (PBMVFLClassifier, pbm)]


# values on both sides of every kind of rule; scikit-learn's intervals take bools, its integral ones no
# integer-valued floats and its "boolean" not 0 and 1 (sqm.mechanism.params.sklearn_constraints): those are left out
_PROBES = [-1, 0, 1, 2, 3, 0.5, 1.0 + 1e-9, 1e-5, 4096.0, math.inf, -math.inf, math.nan, None, "moments", "sgd",
           "newton", "", "label", (0.5, 0.5), True, False]


@pytest.mark.parametrize("index", range(6))
def test_scikit_learn_reads_the_declared_constraints(index):
    """Each estimator's ``_parameter_constraints`` are its declaration's (scikit-learn's validation accepts the
    defaults and accepts or refuses every probe as the declaration does); ``fit`` still runs the declaration's
    check, whose message names the parameter in the project's words."""
    from sklearn.utils._param_validation import InvalidParameterError, validate_parameter_constraints

    estimator, declared = _estimators()[index]
    assert set(estimator._parameter_constraints) == {name for name, _ in declared}
    validate_parameter_constraints(estimator._parameter_constraints, estimator().get_params(), "est")
    for name, p in declared:
        for v in _PROBES:
            if (isinstance(p.rule, Integer) and isinstance(v, float) and v.is_integer()
                    or isinstance(p.rule, Boolean) and v in (0, 1) and not isinstance(v, bool)
                    or isinstance(p.rule, (Interval, Integer)) and isinstance(v, bool)):
                continue
            ours = p.rule is None or v is None and p.optional or v in p.rule
            try:
                validate_parameter_constraints({name: estimator._parameter_constraints[name]}, {name: v}, "est")
                theirs = True
            except InvalidParameterError:
                theirs = False
            assert ours == theirs, (name, v)


@pytest.mark.parametrize("changes, message", [
    ({"epsilon": 0}, r"epsilon must be > 0 \(math.inf allowed\), got 0"),
    ({"delta": 1}, r"delta must lie in \(0, 1\), got 1"),
    ({"epochs": 0}, "epochs must be an integer >= 1, got 0"),
    ({"batch_size": 2.5}, "batch_size must be an integer >= 1, got 2.5"),
    ({"k": math.inf}, "the weight norm bound k must be a finite number > 0, got inf"),
    ({"l2": -0.1}, r"l2 \(lambda\) must be a finite number >= 0, got -0.1"),
    ({"learning_rate": 0}, "learning_rate must be > 0, got 0"),
    ({"intercept": 1.0}, r"intercept \(the constant column's value u\) must lie in \[0, 1\), got 1.0"),
])
def test_the_hdp_parameters_are_checked_by_their_declarations(changes, message):
    """The messages the estimator's hand-written checks gave, now from the declaration; the command's options
    (flags, defaults) come from it too."""
    from sqm.apps.hdp_vfl.estimator import HDPLogisticRegression
    from sqm.apps.hdp_vfl.params import HDPParams

    with pytest.raises(UsageError, match=f"^{message}$"):
        HDPParams(**changes)
    with pytest.raises(UsageError, match=f"^{message}$"):
        HDPLogisticRegression(**changes).fit([[0.1, 0.2], [0.3, 0.1], [0.2, 0.2], [0.0, 0.1]], [0, 1, 0, 1])
    p = _subcommand("hdp-vfl")
    for dest, name in HDPParams.options().items():
        assert p.get_default(dest) == HDPParams.default(name), dest
    sig = inspect.signature(HDPLogisticRegression.__init__).parameters
    assert all(sig[name].default == d.default for name, d in HDPParams.declared())


def _legacy_vfl_public(method, b, beta, epochs, batch_size, lr, embedding_size, hidden, optimizer, C, n_classes,
                       eval_chunk, delta):
    """``VFLConfig.public`` as it was written by hand before the declaration: its fields but the device, in order."""
    return {"method": method, "b": b, "beta": beta, "epochs": epochs, "batch_size": batch_size, "lr": lr,
            "embedding_size": embedding_size, "hidden": hidden, "optimizer": optimizer, "C": C,
            "n_classes": n_classes, "eval_chunk": eval_chunk, "delta": delta}


_VFL_GRID = list(itertools.product(["pbm", "npq", "ldp", "ldp_eq"], [1, 16], [0.15, 0.25], [1, 10], [100], [0.01, 1],
                                   [4, 16], [64], ["adam", "sgd"], [1.0, 2], [None, 2, 10], [4000, 7], [1e-5]))


def test_the_pbm_vfl_configuration_agrees_on_the_dict_it_agreed_on_before():
    """Every method and knob: the same names, order, values and types (the wire encoding is typed and ordered)."""
    from sqm.apps.pbm_vfl.config import VFLConfig
    from sqm.mpc.net.wire import encode

    for values in _VFL_GRID:
        cfg = VFLConfig(*values[:11], "cuda", *values[11:])
        legacy = _legacy_vfl_public(*values)
        assert cfg.public() == legacy and encode(cfg.public()) == encode(legacy), values
        assert list(cfg.public()) == list(legacy)


@pytest.mark.parametrize("job", list(itertools.product(["bgw", "masked"], [0, 0.25], [0, 3], [0, 2**62 + 5],
                                                       [(False, None), (True, None), (True, 2)])))
def test_the_pbm_vfl_task_agrees_on_the_list_it_agreed_on_before(job):
    from sqm.apps.pbm_vfl.config import VFLConfig
    from sqm.apps.pbm_vfl.job import PBMVFLJobTask
    from sqm.mpc.net.wire import encode

    secure_sum, test_fraction, split_seed, batch_seed, (predict, requester) = job
    for values in _VFL_GRID[::37]:
        if values[0] != "pbm":
            continue
        cfg = VFLConfig(*values[:11], "cpu", *values[11:])
        task = PBMVFLJobTask(cfg, secure_sum, test_fraction, split_seed, batch_seed, predict=predict,
                             requester=requester, checkpoint_dir="ckpt" if predict else None)
        legacy_cfg = {k: v for k, v in _legacy_vfl_public(*values).items() if k != "n_classes"}
        legacy = ["pbm-vfl (feature-level)", legacy_cfg, secure_sum, float(test_fraction), int(split_seed),
                  int(batch_seed), ("predict", predict, requester)]
        assert task.public() == legacy and encode(task.public()) == encode(legacy), values


@pytest.mark.parametrize("changes, message", [
    ({"method": "foo"}, r"unknown method 'foo'; choose one of \('pbm', 'npq', 'ldp', 'ldp_eq'\)"),
    ({"b": 0}, "PBM needs an integer number of trials b >= 1, got 0"),
    ({"b": 2.5}, "PBM needs an integer number of trials b >= 1, got 2.5"),
    ({"b": True}, "PBM needs an integer number of trials b >= 1, got True"),
    ({"beta": 0.3}, r"PBM needs beta in \(0, 1/4\], got 0.3"),
    ({"beta": math.nan}, r"PBM needs beta in \(0, 1/4\], got nan"),
    ({"C": math.inf}, "PBM needs a clipping bound C > 0, got inf"),
    ({"epochs": 1.5}, "epochs must be an integer >= 1, got 1.5"),
    ({"batch_size": 0}, "batch-size must be an integer >= 1, got 0"),
    ({"embedding_size": 0}, "embedding-size must be an integer >= 1, got 0"),
    ({"hidden": -1}, "hidden must be an integer >= 1, got -1"),
    ({"eval_chunk": 0}, "eval-chunk must be an integer >= 1, got 0"),
    ({"lr": -1.0}, "learning rate must be > 0, got -1.0"),
    ({"optimizer": "rmsprop"}, "optimizer must be 'adam' or 'sgd', got 'rmsprop'"),
    ({"n_classes": 1}, "need at least 2 classes, got 1"),
    ({"delta": 0.0}, r"delta must lie in \(0, 1\), got 0.0"),
])
def test_the_pbm_vfl_parameters_are_checked_by_their_declarations(changes, message):
    """The messages the hand-written checks gave, from the configuration, the estimator and a replaced
    configuration (a frozen one is changed by dataclasses.replace, which checks again)."""
    import dataclasses

    from sqm.apps.pbm_vfl.config import VFLConfig
    from sqm.apps.pbm_vfl.estimator import PBMVFLClassifier

    with pytest.raises(UsageError, match=f"^{message}$"):
        VFLConfig(**changes)
    with pytest.raises(UsageError, match=f"^{message}$"):
        dataclasses.replace(VFLConfig(), **changes)
    with pytest.raises(dataclasses.FrozenInstanceError):
        VFLConfig().b = 8  # type: ignore[misc]
    if "n_classes" not in changes and "eval_chunk" not in changes:
        with pytest.raises(UsageError, match=f"^{message}$"):
            PBMVFLClassifier(**changes)._config(2)


def test_the_pbm_vfl_counts_are_held_as_ints():
    import numpy as np

    from sqm.apps.pbm_vfl.config import VFLConfig

    cfg = VFLConfig(b=np.int64(8), epochs=3.0, n_classes=np.int32(4))
    assert cfg == VFLConfig(b=8, epochs=3, n_classes=4)
    assert [type(cfg.public()[k]) for k in ("b", "epochs", "n_classes")] == [int, int, int]


@pytest.mark.parametrize("changes, message", [
    ({"secure_sum": "xor"}, r"secure sum must be one of \('bgw', 'masked'\), got 'xor'"),
    ({"test_fraction": 1.0}, r"--test-fraction must be in \[0, 1\), got 1.0"),
    ({"split_seed": -1}, "split_seed must be an integer >= 0, got -1"),
])
def test_the_pbm_vfl_job_parameters_are_checked_by_their_declarations(changes, message):
    from sqm.apps.pbm_vfl.config import VFLConfig
    from sqm.apps.pbm_vfl.job import PBMVFLJobTask

    with pytest.raises(UsageError, match=f"^{message}$"):
        PBMVFLJobTask(VFLConfig(n_classes=None), **changes)


def test_the_pbm_vfl_estimator_command_and_task_block_come_from_the_declaration():
    from sqm.apps.pbm_vfl.config import PBMJobParams, VFLConfig
    from sqm.apps.pbm_vfl.estimator import ESTIMATED, PBMVFLClassifier
    from sqm.cli.command import parse

    sig = inspect.signature(PBMVFLClassifier.__init__).parameters
    assert all(sig[name].default == VFLConfig.default(name) for name in ESTIMATED)
    assert sig["secure_sum"].default == PBMJobParams.default("secure_sum")
    p = _subcommand("pbm-vfl")
    assert set(p.get_default("task_params")) == {
        "b", "beta", "epochs", "batch_size", "learning_rate", "optimizer", "embedding_size", "hidden", "delta",
        "secure_sum", "split_seed", "batch_seed", "test_fraction"} == {*VFLConfig.options(), *PBMJobParams.options()}
    for params in (VFLConfig, PBMJobParams):
        for dest, name in params.options().items():
            assert p.get_default(dest) == params.default(name), dest
    args = parse(["pbm-vfl", "--b", "8", "--beta", "0.25", "--learning-rate", "0.5", "--optimizer", "sgd",
                  "--batch-size", "20", "--delta", "1e-6"])
    assert VFLConfig.from_options(args, device="cpu") == VFLConfig(b=8, beta=0.25, lr=0.5, optimizer="sgd",
                                                                   batch_size=20, delta=1e-6)
