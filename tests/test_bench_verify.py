"""``python -m bench verify``: the verified release beside the plain one through real processes, and with
``--steps`` each step of the input proof timed alone on the first client's first chunk."""
from __future__ import annotations

import argparse

from bench import verify


def test_with_lookups_the_bench_times_their_steps_too(capsys):
    """At gamma 1024 the ranges (width about 1,450) are looked up: the multiplicities, the tables' inverses (every
    party), the inverses and their sharing (the clients), the products part and the lookup check are steps."""
    rep = verify.run([(300, 6)], clients=2, gamma=1024.0, seed=3, steps=True)
    plain, checked = rep["rows"]
    assert checked["same_integers_less_noise"] and checked["exchanges"] == plain["exchanges"] + 12  # 1 + 6 each
    steps = {s["step"].split(" (")[0]: s for s in rep["steps"]}
    for name in ("multiplicities", "tables' inverses", "inverses", "inverses sharing", "lookup check"):
        assert steps[name]["ms"] > 0
    assert steps["tables' inverses"]["times"] == 3 * 2 and steps["lookup check"]["times"] == 2 * 2
    parts = [s["step"] for s in rep["steps"] if s["step"].startswith("prove part")]
    per = -(-300 // 16)  # the records of a node: a column per record and looked-up column, y and its 2 inverses
    assert parts[-1] == f"prove part {len(parts)} (products, {3 * per * 3} columns)"
    verify.print_table(rep)
    assert "lookup check" in capsys.readouterr().out


def test_the_bench_runs_both_releases_and_times_each_step(capsys):
    rep = verify.run([(300, 6)], clients=2, gamma=256.0, seed=3, steps=True)
    plain, checked = rep["rows"]
    assert not plain["verify_inputs"] and checked["verify_inputs"]
    assert plain["same_integers_less_noise"] and checked["same_integers_less_noise"]
    assert checked["bytes"] > plain["bytes"] and checked["exchanges"] > plain["exchanges"]
    assert checked["bytes_ratio"] == checked["bytes"] / plain["bytes"]
    steps = {s["step"].split(" (degree")[0]: s for s in rep["steps"]}
    for name in ("witness", "witness sharing", "pack a share", "unpack a share", "expand a seed", "values",
                 "grid (prover)", "grid (verifier)", "blinds", "prove part 1", "query", "decide", "linear check"):
        assert steps[name]["ms"] > 0 and steps[name]["chunks"] == 1 and steps[name]["chunk_rows"] == 300
    # 3 parties, t = 1: the other client and the server verify (values, queries), one of them from a seed
    assert steps["values"]["times"] == 2 * 2 and steps["expand a seed"]["times"] == 2 * 1
    assert steps["grid (prover)"]["times"] == 2 and steps["witness"]["job_seconds"] == steps["witness"]["ms"] * 2e-3
    parts = [s for s in rep["steps"] if s["step"].startswith("prove part")]
    assert len(parts) == 2 and "degree 8" in parts[0]["step"]
    verify.print_table(rep)
    out = capsys.readouterr().out
    assert "prove part 2 (degree 2" in out and "witness sharing" in out and "2000x" not in out


def test_the_steps_option_is_declared():
    ap = argparse.ArgumentParser()
    verify.add_arguments(ap)
    args = ap.parse_args(["--shapes", "100x4", "--steps"])
    assert args.steps and verify._shape(args.shapes) == (100, 4)
    assert not ap.parse_args([]).steps
