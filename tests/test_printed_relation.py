"""Every epsilon a command prints names its neighbouring relation in words, not only the JSON.

:func:`unnamed` finds the lines that print an epsilon ("epsilon", "eps") without a relation's words
(:data:`sqm.mechanism.report.RELATION_WORDS`).  A table counts as one: its header and rows are named when the notes
printed right under it (the indented lines that follow) name the relation, as :func:`sqm.cli.tables.relation_line`
does.  Each command's printing path runs in process (the plain backend, small data sets)."""
from __future__ import annotations

import logging
import math
import re

import numpy as np
import pytest

from sqm.cli.command import main
from sqm.cli.tables import relation_line
from sqm.mechanism.report import NEIGHBOURING, RELATION_WORDS, ZERO_OUT, PrivacyReport, relation_phrase

EPSILON = re.compile(r"\bepsilons?\b|\beps\b", re.IGNORECASE)
RULE = re.compile(r"-+( +-+)*")  # the line under a table's header (sqm.cli.tables.render_table)


def _names(line: str) -> bool:
    return any(words in line for words in RELATION_WORDS.values())


def unnamed(text: str) -> list[str]:
    """The lines of ``text`` that print an epsilon without naming its relation (a table's lines: unless the notes
    under the table name it)."""
    lines = text.splitlines()
    covered: set[int] = set()
    for k, line in enumerate(lines):
        if k == 0 or not RULE.fullmatch(line):
            continue
        end = k + 1
        while end < len(lines) and lines[end].strip() and not lines[end].startswith(" "):
            end += 1  # the table's rows
        notes = end
        while notes < len(lines) and lines[notes].startswith("  "):
            notes += 1  # the indented notes under it
        if any(_names(lines[j]) for j in range(end, notes)):
            covered.update(range(k - 1, notes))
    return [line for i, line in enumerate(lines) if EPSILON.search(line) and i not in covered and not _names(line)]


def test_the_check_finds_an_epsilon_without_its_relation():
    table = "method  eps server\n------  ----------\nSQM         1.0000"
    assert unnamed("PCA at epsilon 1, delta 1e-5") == ["PCA at epsilon 1, delta 1e-5"]
    assert unnamed(table) == ["method  eps server"]
    assert unnamed(table + "\n  the seed is public") == ["method  eps server"]
    assert unnamed(table + f"\n  {relation_line([PrivacyReport(epsilon_server=1.0, delta=1e-5)])}") == []
    assert unnamed(f"epsilon 1 ({relation_phrase(ZERO_OUT, 'the server')})") == []


def test_the_words_of_each_relation():
    """Every report relation has words; zero-out's are the moments release's null record (the intercept's constant
    included), as the long description says."""
    assert set(NEIGHBOURING) <= set(RELATION_WORDS)
    assert relation_phrase(ZERO_OUT, "the server") == (
        "zero-out: a record replaced by a null record that contributes nothing, intercept constant included, "
        "against the server")
    assert "the intercept's constant included" in NEIGHBOURING[ZERO_OUT]
    assert relation_phrase("none", "the server") == "no privacy guarantee"
    with pytest.raises(ValueError, match="neighbouring must be one of"):
        relation_phrase("add/remove")


def test_the_table_line_names_each_relation():
    one = [PrivacyReport(method="SQM", epsilon_server=1.0, delta=1e-5),
           PrivacyReport(method="central DP", epsilon_server=1.0, delta=1e-5),
           PrivacyReport(method="non-private", epsilon_server=math.inf, delta=0.0, neighbouring="none")]
    assert relation_line(one) == (f"every epsilon above: {RELATION_WORDS[ZERO_OUT]}; inf (non-private): "
                                  f"no privacy guarantee")
    two = [("PBM-VFL", "embedding"), ("DPSGD", ZERO_OUT)]
    assert relation_line(two) == (f"epsilon of PBM-VFL: {RELATION_WORDS['embedding']}; epsilon of DPSGD: "
                                  f"{RELATION_WORDS[ZERO_OUT]}")


def _printed(capsys, argv: list[str]) -> str:
    assert main(argv) == 0, argv
    out = capsys.readouterr().out
    assert EPSILON.search(out), f"sqm {' '.join(argv)} printed no epsilon"
    return out


PLAIN = ["--backend", "plain", "--seed", "1", "-q"]
LOCAL = {
    "pca": ["pca", "--dataset", "iris", "--parties", "2", "--components", "2"],
    "linreg": ["linreg", "--parties", "2"],
    "logreg moments": ["logreg", "--parties", "2", "--solver", "moments", "--no-baselines"],
    "correlation": ["correlation", "--dataset", "iris", "--parties", "2"],
    "demo": ["demo", "--dataset", "iris"],
}


@pytest.mark.parametrize("name", sorted(LOCAL))
def test_local_comparisons_name_the_relation(name, capsys):
    out = _printed(capsys, LOCAL[name] + PLAIN)
    assert unnamed(out) == [], out


@pytest.mark.slow
def test_logreg_with_baselines_and_sgd_names_the_relation(capsys):
    out = _printed(capsys, ["logreg", "--parties", "2", "--solver", "moments"] + PLAIN)
    out += _printed(capsys, ["logreg", "--parties", "2", "--solver", "sgd", "--no-baselines", "--epochs", "1"]
                    + PLAIN)
    assert "no privacy guarantee" in out and unnamed(out) == [], out


@pytest.mark.slow
def test_hdp_vfl_and_pbm_vfl_name_the_relation(capsys):
    pytest.importorskip("torch")
    out = _printed(capsys, ["hdp-vfl", "--epochs", "1", "--sqm-epochs", "1"] + PLAIN)
    out += _printed(capsys, ["pbm-vfl", "--parties", "2", "--epochs", "1"] + PLAIN)
    assert RELATION_WORDS["embedding"] in out and RELATION_WORDS["sample"] in out
    assert unnamed(out) == [], out


def test_a_job_its_announcement_ledger_and_budget_name_the_relation(tmp_path, capsys, caplog):
    """``sqm pca --job`` (in process): each party's announcement, the server's table and its ledger line; then
    ``sqm budget set/show/list`` on that ledger."""
    from sqm.framework.spec import write_party_csvs

    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 4))
    job = write_party_csvs(X / np.linalg.norm(X, axis=1).max(), tmp_path, 2, dataset="toy", min_intersection=1)
    ledger = str(tmp_path / "ledger.sqlite")
    out = _printed(capsys, ["budget", "set", "toy", "--budget", "4,1e-5", "--ledger", ledger])
    with caplog.at_level(logging.INFO, logger="sqm"):
        out += _printed(capsys, ["pca", "--job", job, "--components", "2", "--backend", "plain", "--seed", "1",
                                 "--insecure-reproducible", "--ledger", ledger])
    announced = [r.getMessage() for r in caplog.records if r.getMessage().startswith("about to run job")]
    assert len(announced) == 3 and all(relation_phrase(ZERO_OUT) in m for m in announced)
    assert f"({relation_phrase(ZERO_OUT, 'the server')}); spent" in out  # the ledger line
    out += _printed(capsys, ["budget", "show", "toy", "--ledger", ledger])
    out += _printed(capsys, ["budget", "list", "--ledger", ledger])
    assert unnamed("\n".join(announced) + "\n" + out) == [], out


def test_a_job_tasks_default_relation_is_the_reports_zero_out():
    """JobTask spells the zero-out relation itself (its module stays free of numpy for --help): the same text."""
    from sqm.framework.jobtask import JobTask
    from sqm.mechanism.report import NEIGHBOURING, ZERO_OUT

    assert JobTask.neighbouring == ZERO_OUT and ZERO_OUT in NEIGHBOURING


def test_an_over_budget_error_names_the_relation_of_its_epsilons(tmp_path):
    """The refusal's epsilons (budget, spent, left) are in the dataset's unit, named in words: zero-out for SQM
    releases, embedding for PBM-VFL's."""
    from sqm.mechanism.events import PBMDpEvent, server_event
    from sqm.mechanism.ledger import BudgetExceeded, Ledger

    led = Ledger(str(tmp_path / "l.db"))
    for dataset, events, unit in (("d", [server_event(10.0, 10.0, 1e4)], ZERO_OUT),
                                  ("emb", [PBMDpEvent(8, 0.2, 3, 4, "feature")], "embedding")):
        led.set_budget(dataset, 1e-3, 1e-5)
        for call in (lambda d=dataset, e=events: led.check(d, e), lambda d=dataset, e=events: led.reserve(d, e, "x")):
            with pytest.raises(BudgetExceeded) as err:
                call()
            assert str(err.value).endswith(f"(every epsilon here: {relation_phrase(unit)})")
            assert unnamed(str(err.value)) == []


def _table_text(print_table, rep: dict, capsys) -> str:
    print_table(rep)
    return capsys.readouterr().out


def test_the_benches_tables_name_the_relation(capsys):
    """The tables of ``python -m bench`` name the relation of every epsilon they print: the stored record of
    lr-gamma, and crafted reports of the shapes the other benches print."""
    import json
    from pathlib import Path

    import bench.hdp_vfl
    import bench.lr_defaults
    import bench.lr_gamma
    import bench.lr_threshold
    import bench.lr_utility

    stored = json.loads((Path(__file__).parents[1] / "docs/benchmarks/data/lr-gamma.json").read_text())["report"]
    refs = dict(single_party=0.8, centralized=0.9, nonprivate_vfl=0.9, majority_class=0.6)
    hdp = dict(settings=dict(batch_size=64, l2=0.01, epochs=5, k=1, delta=1e-5, learning_rate=0.1, intercept=1,
                             calibration="tight", repeats=2), epsilons=[1.0, 4.0],
               figure1={"HDP-VFL": dict(rows=[dict(accuracy_mean=0.8, paper_sigma_ratio=1.1)] * 2, references=refs)},
               figure2=[dict(epochs=5, k=1.0, rows=[dict(accuracy_mean=0.8)] * 2)],
               target_breast_cancer_eps1=dict(mean=0.9, std=0.01), seconds=1.0, guarantee_note="",
               mpyc_check=dict(dataset="bc", identical=True, seconds_two_processes=1.0, bytes_sent=10))
    cell = dict(dataset="bc", epsilon=1.0, method="sqm", accuracy=0.9, accuracy_std=0.01, auc=0.95, auc_std=0.01,
                epsilon_server=1.0)
    check = dict(dataset="bc", n_train=100, d=3, majority=0.6, epsilon=1.0, gap_accuracy_points=1.0,
                 gap_auc_points=0.5, within_2=True)
    defaults = dict(runs=2, delta=1e-5, backend="plain", rows=[cell], checks=[check], all_met=True, seconds=1.0)
    lr_def = dict(train=100, test=50, backend="plain", epsilon=1.0, delta=1e-5, majority=0.6, sqm_mean=0.8,
                  dpsgd_mean=0.8, target_met=True, seconds=1.0,
                  rows=[dict(seed=0, sqm=0.8, dpsgd=0.8, sqm_epsilon=1.0, dpsgd_epsilon=1.0, q=0.01, rounds=10)])
    threshold = dict(rows=[dict(dataset="bc", epsilon=1.0, scale=1.0, accuracy=0.9, accuracy_std=0.01,
                                majority=0.6)])
    import bench.pca_utility

    data = Path(__file__).parents[1] / "docs/benchmarks/data"
    pca = json.loads((data / "pca-utility.json").read_text())["report"]["results"]["digits"]
    for print_table, rep in ((lambda r: bench.pca_utility.print_table("digits", r), pca),
                             (bench.lr_gamma.print_table, stored),
                             (bench.hdp_vfl.print_table, hdp),
                             (bench.lr_utility.print_defaults, defaults), (bench.lr_defaults.print_table, lr_def),
                             (bench.lr_threshold.print_table, threshold)):
        text = _table_text(print_table, rep, capsys)
        assert EPSILON.search(text), print_table
        assert unnamed(text) == [], unnamed(text)
