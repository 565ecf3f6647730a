"""``python -m bench utility`` (and ``sqm bench``): the cells' checks, a tiny real run, the launcher."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bench import utility
from bench.command import parse
from sqm.cli import bench_cli
from sqm.errors import UsageError


def _s(mean: float) -> dict:
    return {"mean": mean, "std": 0.0, "min": mean, "runs": 1}


def test_each_check_passes_and_fails_at_its_target():
    assert utility.met("pca", {"sqm": _s(99.0), "reference": _s(100.0)})
    assert not utility.met("pca", {"sqm": _s(98.9), "reference": _s(100.0)})
    assert utility.met("lr", {"gap_accuracy_points": 2.0, "gap_auc_points": -5.0})
    assert not utility.met("lr", {"gap_accuracy_points": 1.0, "gap_auc_points": 2.1})
    assert utility.met("linreg", {"sqm": _s(0.30), "reference": _s(0.35), "mean": _s(-0.01)})
    assert not utility.met("linreg", {"sqm": _s(0.29), "reference": _s(0.35), "mean": _s(-0.01)})
    assert not utility.met("linreg", {"sqm": _s(-0.02), "reference": _s(-0.03), "mean": _s(-0.01)})  # below mean
    assert utility.met("pbm", {"sqm": _s(0.90), "reference": _s(0.95)})
    assert not utility.met("pbm", {"sqm": _s(0.89), "reference": _s(0.95)})


def test_every_data_set_has_tasks_and_eight_or_more_are_offered():
    assert len(utility.DATASETS) >= 8 and set(utility.TASKS) == set(utility.DATASETS)
    assert all(set(t) <= set(utility.METHODS) for t in utility.TASKS.values())
    assert {d for d, t in utility.TASKS.items() if "linreg" in t} == set(utility.LINREG_TARGETS)


def test_a_tiny_run_prints_names_the_relation_and_writes_json(tmp_path, capsys):
    from tests.test_printed_relation import unnamed

    out = tmp_path / "u.json"
    args = parse(["utility", "--datasets", "wine", "--methods", "pca", "linreg", "--epsilons", "4", "--pca-runs", "2",
                  "--linreg-runs", "3", "-q", "--json", str(out)])
    assert args.func(args) == 0
    text = capsys.readouterr().out
    assert unnamed(text) == []
    rows = json.loads(out.read_text())["details"]["rows"]
    assert [(r["dataset"], r["method"], r["epsilon"]) for r in rows] == [("wine", "pca", 4.0), ("wine", "linreg", 4.0)]
    for r in rows:
        assert r["sqm"]["runs"] == {"pca": 2, "linreg": 3}[r["method"]] and r["met"] == utility.met(r["method"], r)
        assert r["epsilon_spent"] == pytest.approx(4.0, rel=1e-3)


def test_pass_through_sends_everything_after_bench_to_the_benchmark():
    assert bench_cli.pass_through(["bench", "--help"]) == ["bench", "--", "--help"]
    assert bench_cli.pass_through(["-v", "bench", "utility", "-q"]) == ["-v", "bench", "--", "utility", "-q"]
    assert bench_cli.pass_through(["pca", "--help"]) == ["pca", "--help"]


def test_the_launcher_refuses_without_a_checkout(monkeypatch):
    from sqm.cli.command import parse as sqm_parse

    monkeypatch.setattr(bench_cli, "checkout_root", lambda: None)
    args = sqm_parse(["bench", "utility", "--help"])
    with pytest.raises(UsageError, match="source checkout"):
        args.func(args)


def test_the_launcher_runs_the_checkouts_bench():
    assert bench_cli.checkout_root() is not None
    done = subprocess.run([sys.executable, "-m", "sqm", "bench", "--help"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and "utility" in done.stdout and "lr-tuned" in done.stdout


def test_merge_and_page_show_exactly_what_the_command_prints(tmp_path, capsys):
    """Two runs merged into one report (rows in the bench's order whatever the files' order, the checks over
    all), and the page's generated block is the printed tables of that report, replaced in place."""
    outs = []
    for k, eps in enumerate(("2", "8")):
        outs.append(tmp_path / f"r{k}.json")
        args = parse(["utility", "--datasets", "iris", "--methods", "pca", "--epsilons", eps, "--pca-runs", "2", "-q",
                      "--json", str(outs[-1])])
        assert args.func(args) == 0
    page = tmp_path / "page.md"
    page.write_text(f"# t\n\n{utility.BLOCK[0]}\nold\n{utility.BLOCK[1]}\n\nafter\n")
    args = parse(["utility", "--merge", *map(str, outs[::-1]), "--page", str(page), "--json", str(tmp_path / "m.json"),
                  "-q"])
    assert args.func(args) == 0
    rep = json.loads((tmp_path / "m.json").read_text())["details"]
    assert [r["epsilon"] for r in rep["rows"]] == [2.0, 8.0] and rep["all_met"] == all(r["met"] for r in rep["rows"])
    text = page.read_text()
    assert "old" not in text and text.endswith(f"{utility.BLOCK[1]}\n\nafter\n")
    assert "```text\n" + utility.printed(rep).strip("\n") + "\n```" in text
    # a later run replacing every cell of an earlier one: the earlier one is listed, not shown, and not timed
    doc = json.loads(outs[1].read_text())
    doc["details"]["seconds"], doc["details"]["cpu_seconds"] = 1000.0, 900.0
    again = tmp_path / "r1-again.json"
    again.write_text(json.dumps(doc))
    runs = [json.loads(p.read_text())["details"] for p in outs]
    rep = utility.merge([outs[1], outs[0], again])
    assert [m["shown"] for m in rep["merged"]] == [False, True, True]
    assert rep["seconds"] == runs[0]["seconds"] + 1000.0 and rep["cpu_seconds"] == runs[0]["cpu_seconds"] + 900.0


def test_the_utility_page_shows_its_stored_report():
    """docs/benchmarks/utility.md's results are the printed tables of docs/benchmarks/utility.json."""
    from pathlib import Path

    root = Path(__file__).parents[1]
    rep = json.loads((root / "docs/benchmarks/utility.json").read_text())["details"]
    assert len({r["dataset"] for r in rep["rows"]}) >= 8
    text = (root / "docs/benchmarks/utility.md").read_text()
    assert "```text\n" + utility.printed(rep).strip("\n") + "\n```" in text


def test_the_pbm_cell_runs_the_tuned_protocol_at_the_fixed_epsilon(monkeypatch):
    """pbm_cell: bench.pbm_tuned's protocol, run r with seed r, at the epsilon fixed in advance, on the subsample of
    at most MAX_RECORDS records; the gap of the mean test accuracies and the largest epsilons spent."""
    from bench import pbm_tuned

    loads, calls = [], []

    def fake_load(name, data, max_records, seed):
        loads.append((name, max_records, seed))
        return "X", "y" * 7, 10

    def fake_cell(name, epsilon, seed, *, loaded):
        calls.append((name, epsilon, seed, loaded))
        res = {m: dict(accuracy=a, chosen={"lr": 0.01}, b=16, beta=0.1, score_b=64, score_beta=0.2,
                       epsilon_spent=e, epsilon_sample=10 * e)
               for m, a, e in (("pbm", 0.90 + seed / 100, 199.0 + seed / 10), ("npq", 0.97, float("inf")))}
        return {"split": (4, 2, 1), **res}

    monkeypatch.setattr(pbm_tuned, "load", fake_load)
    monkeypatch.setattr(pbm_tuned, "tuned_cell", fake_cell)
    row = utility.pbm_cell("digits", 3)
    assert loads == [("digits", pbm_tuned.MAX_RECORDS, 0)]
    assert calls == [("digits", pbm_tuned.EPSILON, r, ("X", "y" * 7, 10)) for r in range(3)]
    assert row["sqm"]["mean"] == pytest.approx(0.91) and row["reference"]["mean"] == pytest.approx(0.97)
    assert row["gap_points"] == pytest.approx(6.0) and not utility.met("pbm", row)
    assert row["epsilon_spent"] == pytest.approx(199.2) and row["epsilon_sample"] == pytest.approx(1992.0)
    assert row["records"] == 7 and row["setting"]["epsilon"] == pbm_tuned.EPSILON


def test_every_fit_runs_in_one_thread_and_the_pools_are_restored(monkeypatch):
    """run() holds torch's intra-op pool and BLAS's (threadpoolctl) at one thread while the cells run, and gives
    them back after."""
    import torch
    from threadpoolctl import threadpool_info

    from bench import utility

    seen = {}

    def fake_run(*args):
        seen["torch"] = torch.get_num_threads()
        seen["pools"] = [p["num_threads"] for p in threadpool_info()]
        return {"rows": []}

    monkeypatch.setattr(utility, "_run", fake_run)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert utility.run(("iris",), ("pca",), (1.0,)) == {"rows": []}
        assert seen["torch"] == 1 and seen["pools"] and all(n == 1 for n in seen["pools"])
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("name,module", [("lr-tuned", "lr_tuned"), ("lr-select", "lr_select"),
                                         ("lr-constants", "lr_constants")])
def test_the_logistic_regression_benches_fit_in_one_thread(name, module, monkeypatch):
    import importlib

    import torch

    mod = importlib.import_module(f"bench.{module}")
    seen = []
    monkeypatch.setattr(mod, "run", lambda *a, **k: seen.append(torch.get_num_threads()) or {"rows": []})
    monkeypatch.setattr(mod, "finish", lambda rep, args, table=None: 0)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        args = parse([name, "-q"])
        assert args.func(args) == 0 and seen == [1] and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
