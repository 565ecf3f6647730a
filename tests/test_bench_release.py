"""python -m bench release: the DP release alone through real party processes.  The options' parsing and refusals;
the report's rows, release check and target from given runs; the baseline switch of the parties' code; a tiny real
run (every party's phases, the same integers released by every run and by a baseline of the same code).  No timing
bounds."""
import json
import os

import pytest

from bench import release
from bench.command import build_parser, parse
from sqm.errors import UsageError
from sqm.mpc.net import launch


def test_options_parse_with_their_defaults():
    args = parse(["release", "--rows", "300,1e3", "--cols", "6", "--clients", "3", "--repeat", "2",
                  "--baseline", "/x/old"], build_parser())
    assert (args.rows, args.cols, args.clients, args.repeat, args.baseline) == ("300,1e3", "6", "3", 2, "/x/old")
    assert args.command == "bench release" and args.func is release.cli
    plain = parse(["release"], build_parser())
    assert (plain.rows, plain.cols, plain.clients, plain.repeat, plain.baseline) == ("195666", "117", "2,3", 3, None)


@pytest.mark.parametrize("argv, message", [
    (["--clients", "1"], "--clients takes a comma list of integers >= 2"),
    (["--rows", "many"], "--rows takes a comma list of integers, got 'many'"),
    (["--repeat", "0"], "--repeat takes an integer >= 1"),
    (["--cols", "2", "--clients", "3"], "--cols 2: every one of 3 clients needs a column"),
])
def test_bad_options_are_refused(argv, message, monkeypatch):
    monkeypatch.setattr(release, "run", lambda *a, **k: pytest.fail("refused before any run"))
    args = parse(["release", "--rows", "50", "--cols", "6", "--clients", "2"] + argv, build_parser())
    with pytest.raises(UsageError) as err:
        args.func(args)
    assert message in str(err.value)


def _run(clients, side, seconds, digest="a", rows=195666, cols=117):
    return dict(clients=clients, rows=rows, cols=cols, side=side, seconds=seconds, call_seconds=seconds + 0.3,
                before_spawn_seconds=0.2, after_collect_seconds=0.1, cpu_seconds=2 * seconds, load_1min=0.5,
                processes=clients + 1, phases=[], starts=[], released_sha256=digest)


def test_rows_quote_the_fastest_run_and_the_target_is_the_kddcup_cell_with_2_clients():
    runs = [_run(2, release.THIS, 2.7), _run(2, release.BASELINE, 2.6), _run(2, release.THIS, 2.4),
            _run(3, release.THIS, 2.0)]
    rep = release.summarize(dict(runs=runs))
    mine = [r for r in rep["rows"] if (r["clients"], r["side"]) == (2, release.THIS)]
    assert len(rep["rows"]) == 3 and len(mine) == 1
    assert mine[0]["seconds"] == 2.4 and mine[0]["all_seconds"] == [2.7, 2.4] and mine[0]["min_cpu_seconds"] == 4.8
    assert rep["target_met"] is True and rep["target_load_1min"] == [0.5, 0.5]  # 2.4 < 2.5, this checkout's runs
    assert all(r["same_release"] for r in rep["rows"])
    runs[0]["seconds"] = runs[2]["seconds"] = 2.5  # not under the target
    assert release.summarize(dict(runs=runs))["target_met"] is False
    assert release.summarize(dict(runs=[_run(2, release.THIS, 1.0, rows=1000)]))["target_met"] is None


def test_a_side_that_releases_other_integers_is_flagged():
    runs = [_run(2, release.THIS, 2.0, "a"), _run(2, release.BASELINE, 2.0, "b"), _run(3, release.THIS, 2.0, "c")]
    rows = release.summarize(dict(runs=runs))["rows"]
    assert [r["same_release"] for r in rows] == [False, False, True]


def test_parties_from_switches_the_parties_code_and_restores_it(tmp_path):
    before = (launch._ROOT, os.getcwd())
    with release.parties_from(None):
        assert (launch._ROOT, os.getcwd()) == before
    with pytest.raises(RuntimeError), release.parties_from(str(tmp_path)):
        assert str(tmp_path) == launch._ROOT
        assert os.getcwd() == str(tmp_path)  # python -m puts the working folder first on the parties' path
        raise RuntimeError("a failed run")
    assert (launch._ROOT, os.getcwd()) == before


@pytest.mark.slow
def test_a_tiny_real_run_reports_every_partys_phases_and_one_release(tmp_path, capsys):
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = tmp_path / "release.json"
    args = parse(["release", "--rows", "300", "--cols", "6", "--clients", "2", "--repeat", "2", "--baseline", here,
                  "--json", str(out)], build_parser())
    assert args.func(args) == 0
    rep = json.loads(out.read_text())["details"]  # the output document holds the report under details
    assert rep["bytecode"] is True and rep["target_met"] is None and len(rep["runs"]) == 4
    assert [r["side"] for r in rep["rows"]] == [release.THIS, release.BASELINE]
    assert all(r["same_release"] for r in rep["rows"])  # every run, both sides: the same integers (same seed)
    for r in rep["rows"]:
        assert [p["process"] for p in r["phases"]] == ["server", "client 1", "client 2"]
        assert all(p["process start"] > 0 and p["total"] > 0 and p["cpu"] > 0 for p in r["phases"])
        assert all("share inputs (local)" in p for p in r["phases"][1:])
        assert all(set(s) == {"process", "interpreter", "stdlib", "program", "runtime", "connect"}
                   for s in r["starts"])
        assert r["seconds"] <= r["call_seconds"]
    assert "seconds per phase, 2 x 300 x 6" in capsys.readouterr().out


def test_frame_costs_time_this_checkout_and_a_baselines_wire_code():
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    got = release.frame_costs(100, 7, baseline=here, repeat=2)
    assert sorted(got) == sorted([release.THIS, release.BASELINE])
    for side in got.values():
        assert side["mib"] == pytest.approx((100 * 7 * 8 + 60) / 2 ** 20, rel=0.1)
        assert all(side[k] >= 0 for k in ("encode_ms", "send_copy_ms", "decode_ms"))


@pytest.mark.slow
def test_the_baseline_parties_run_the_baselines_own_code(tmp_path):
    """A baseline whose party module stops at once: the baseline's run fails (its parties imported its code, not
    this checkout's, although the launcher's working folder holds this checkout)."""
    import shutil

    import sqm

    shutil.copytree(os.path.dirname(sqm.__file__), tmp_path / "sqm", ignore=shutil.ignore_patterns("__pycache__"))
    with open(tmp_path / "sqm" / "mpc" / "net" / "party.py", "a") as f:
        f.write("\nraise SystemExit('the baseline code ran')\n")
    args = parse(["release", "--rows", "300", "--cols", "6", "--clients", "2", "--repeat", "1", "--baseline",
                  str(tmp_path)], build_parser())
    with pytest.raises(Exception) as err:
        args.func(args)
    assert "the baseline code ran" in str(err.value)
