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
