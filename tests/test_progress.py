"""Progress on every long step of a job (sqm.framework.progress, sqm.cli.progress): the record alignment's ids
blinded, each secure evaluation's chunks, training rounds and scoring are reported to the bars the face installs;
the library prints nothing, -q installs none and leaves stderr empty, and the bars change neither stdout, the JSON
output nor the released values."""
import json
import sys

import numpy as np
import pytest

from sqm.cli.command import main, parse
from sqm.framework.progress import NullBar, follow_steps, make_bar, set_bar_factory, step_lines
from sqm.framework.spec import write_party_csvs
from sqm.mpc.protocols.psi import ALIGNMENT_STEP


class Bar(NullBar):
    """A bar that remembers what it was told: its description, its total and each position it reached."""

    made: list = []

    def __init__(self, total=None, desc="", **kwargs):
        super().__init__(total=total)
        self.desc, self.positions, self.closed = desc, [], False
        Bar.made.append(self)

    def update(self, k: int = 1) -> None:
        super().update(k)
        self.positions.append(self.n)

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def bars():
    Bar.made = []
    set_bar_factory(Bar)
    try:
        yield Bar.made
    finally:
        set_bar_factory(None)


def _run(argv) -> int:
    """A command as ``sqm`` runs it, without installing tqdm (the test's bars stay)."""
    args = parse(argv)
    return int(args.func(args) or 0)


def _finished(made, step: str) -> list:
    """The bars of ``step`` (client 1's), each at its total at the end."""
    got = [b for b in made if b.desc == f"{step} (client 1)"]
    assert got, [b.desc for b in made]
    for b in got:
        assert b.total is not None and b.n == b.total and b.closed, (b.desc, b.n, b.total)
    return got


def _write(folder, label_range: bool) -> str:
    """A job of 60 records: client 1 holds x0, x1, client 2 x2, x3 and the 0/1 column x4; every feature's range
    declared (scaled, nothing clipped), x4's too where it is a feature (``label_range``)."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(60, 4)) * 0.25
    y = (X[:, 0] + 0.1 * rng.normal(size=60) > 0).astype(float)
    ranges = {**{f"x{j}": [-3.0, 3.0] for j in range(4)}, "x4": [0.0, 1.0]}
    second = ("x2", "x3", "x4") if label_range else ("x2", "x3")
    return write_party_csvs(np.hstack([X, y[:, None]]), str(folder), col_counts=[2, 3], min_intersection=1,
                            ids=[str(i) for i in range(60)], bounds=[{c: ranges[c] for c in ("x0", "x1")},
                                                                     {c: ranges[c] for c in second}])


@pytest.fixture
def job(tmp_path):
    return _write(tmp_path, label_range=True)


def test_a_job_reports_the_alignment_the_evaluation_and_training_rounds(job, bars, tmp_path):
    assert _run(["pca", "--job", job, "--components", "1", "--backend", "plain", "--json",
                 str(tmp_path / "pca.json")]) == 0
    [align] = _finished(bars, ALIGNMENT_STEP)
    assert align.total == 60  # client 1 blinds its own 60 ids once, under the clients' key (threshold keys)
    _finished(bars, "secure evaluation")
    bars.clear()
    assert _run(["logreg", "--job", _write(tmp_path / "lr", label_range=False), "--label-column", "x4", "--epsilon",
                 "4", "--gamma", "256", "--q", "0.25", "--epochs", "2", "--learning-rate", "1", "--backend", "plain",
                 "--solver", "sgd"]) == 0
    [rounds] = _finished(bars, "training rounds")
    assert rounds.total == 8 and rounds.positions[-1] == 8  # 2 epochs of 1 / q = 4 rounds
    bars.clear()
    assert _run(["score", "--job", job, "--model", str(tmp_path / "pca.json"), "--backend", "plain",
                 "--scores", str(tmp_path / "s.csv")]) == 0
    _finished(bars, ALIGNMENT_STEP)
    _finished(bars, "secure evaluation")  # the scores' sum on shares


def test_quiet_prints_nothing_on_stderr_and_bars_change_no_output(job, tmp_path, capsys, monkeypatch):
    assert main(["pca", "--job", job, "--components", "2", "--backend", "plain", "-q"]) == 0
    assert capsys.readouterr().err == ""  # a successful job: no bar, no announcement
    seeded = ["pca", "--job", job, "--components", "2", "--backend", "plain", "--seed", "4",
              "--insecure-reproducible"]
    assert main([*seeded, "-q", "--json", str(tmp_path / "quiet.json")]) == 0
    quiet = capsys.readouterr()
    assert quiet.err.startswith("WARNING: --insecure-reproducible") and ALIGNMENT_STEP not in quiet.err
    assert main([*seeded, "--json", str(tmp_path / "piped.json")]) == 0
    piped = capsys.readouterr()  # stderr not a terminal: the announcement, no bar frames
    assert "about to run job" in piped.err and ALIGNMENT_STEP not in piped.err
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # a terminal: tqdm draws its bars
    assert main([*seeded, "--json", str(tmp_path / "bars.json")]) == 0
    shown = capsys.readouterr()
    assert ALIGNMENT_STEP in shown.err and "about to run job" in shown.err

    def same(out: str) -> list:  # stdout, its timings aside (seconds differ from run to run)
        return [ln for ln in out.splitlines() if "seconds" not in ln and not ln.startswith("SQM ")]
    assert same(quiet.out) == same(shown.out)
    released = [json.loads((tmp_path / f).read_text())["released"] for f in ("quiet.json", "piped.json", "bars.json")]
    assert released[0] == released[1] == released[2]


def test_the_library_prints_nothing_without_a_bar_factory(tmp_path, capsys):
    set_bar_factory(None)
    assert isinstance(make_bar(total=3), NullBar)
    write, close = step_lines(str(tmp_path / "steps.1"))
    write("training rounds", 1, 3)
    write("secure evaluation", 2, None)
    close()
    with follow_steps(str(tmp_path / "steps.1"), "client 1") as shown:
        pass
    assert [(s, b.n, b.total) for s, b in shown.items()] == [("training rounds", 1, 3), ("secure evaluation", 2, None)]
    assert capsys.readouterr() == ("", "")
