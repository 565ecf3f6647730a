"""Each party prints the job it is about to run, with every privacy-relevant switch, before anything derived
from its records is sent (the first line of its log that names the job)."""
from __future__ import annotations

import logging

import numpy as np

from sqm.apps.pca import PCAJobTask
from sqm.apps.pca.params import PCAParams
from sqm.framework.party import JobParty
from sqm.framework.runners import simulate
from sqm.framework.spec import load_job, write_party_csvs


class _Ctx:
    pid = 1
    session = None


def _line(task, **kw) -> str:
    return JobParty(1, "a.csv", "id", task, **kw).announcement(_Ctx(), {"rows": 10, "names": ["a", "b"]},
                                                                {1: 10, 2: 12})


def test_every_declared_parameter_and_alignment_switch_is_named():
    line = _line(PCAJobTask(2, 1.0, verify_sharing=True), hide_membership=True, min_intersection=50)
    assert "pca released to the server at epsilon 1, delta 1e-05" in line
    for name in PCAParams.names():
        if name not in ("epsilon", "delta"):
            assert f"{name} " in line, name
    for switch in ("verify_sharing True", "hide_membership True", "min_intersection 50", "max_set_ratio 10",
                   "ledger none", "(hiding membership)"):
        assert switch in line, switch
    assert "INSECURE" not in line


def test_seeded_randomness_is_called_insecure():
    assert "randomness INSECURE: seeded" in _line(PCAJobTask(2, 1.0, seed=3, insecure_reproducible=True))


def test_the_line_is_logged_before_the_alignment(tmp_path, caplog):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 4))
    spec = load_job(write_party_csvs(X / np.linalg.norm(X, axis=1).max(), tmp_path, 2, min_intersection=1))
    with caplog.at_level(logging.INFO, logger="sqm"):
        simulate(spec, PCAJobTask(2, 1.0, seed=1, insecure_reproducible=True))
    lines = [r.getMessage() for r in caplog.records]
    about = [i for i, m in enumerate(lines) if m.startswith("about to run job")]
    assert len(about) == 3  # the server and both clients
    assert all("switches: n_components 2, gamma " in lines[i] for i in about)
    psi = [i for i, m in enumerate(lines) if m.startswith("party ") and "record alignment (PSI)" in m]
    assert len(psi) == 3 and min(psi) > max(about)  # every party announced before any party aligned


def test_the_job_files_page_shows_this_line():
    """docs/how-to/job-files.md's example (``<!-- output: checked by tests/test_announcement.py -->``, wrapped
    there) is this line, word for word: edit the page's block to the line printed here when the wording changes."""
    from test_docs_outputs import ELSEWHERE, ROOT, blocks

    shown = [b for b in blocks(ROOT / "docs" / "how-to" / "job-files.md") if ELSEWHERE.fullmatch(b.marker)]
    line = _line(PCAJobTask(2, 1.0), hide_membership=True)
    assert len(shown) == 1 and " ".join(shown[0].body.split()) == line, f"{shown[0].where} should show:\n{line}"
