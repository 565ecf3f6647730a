"""python -m bench bgw-cost at a tiny shape: the report the issue names, through real MPyC processes."""
import json

from bench.command import main


def test_bgw_cost_report_and_stock_comparison(tmp_path):
    out = tmp_path / "bgw.json"
    assert main(["bgw-cost", "--rows", "300", "--cols", "6", "--gammas", "64,4096",
                 "--stock-rows", "60", "--json", str(out), "--plot", str(tmp_path / "bgw.png")]) == 0
    doc = json.loads(out.read_text())  # sqm.cli.output: the table's rows as results, the report as details
    rep = doc["details"]
    assert doc["command"] == "bench bgw-cost" and doc["results"] == rep["rows"]
    assert rep["shape"] == [300, 6] and rep["parties"] == 3 and rep["plaintext_seconds"] >= 0
    assert rep["stock_shape"] == [60, 6] and rep["stock_seconds"] > 0
    assert rep["stock_identical"] and rep["fast_identical"]  # both equal the exact integers
    assert [r["gamma"] for r in rep["rows"]] == [64.0, 4096.0]
    for r in rep["rows"]:
        assert set(r) >= {"gamma", "field_bits", "bytes_per_party", "seconds", "rel_error", "max_rss_bytes"}
        assert len(r["bytes_per_party"]) == 3 and min(r["bytes_per_party"]) > 0
    assert rep["rows"][1]["field_bits"] > rep["rows"][0]["field_bits"]  # the field grows with gamma
    rd = rep["rounding"]  # the clients' rounding, timed against independent rounding in the same run
    assert rd["values"] == 300 * 6 and rd["gamma"] == 4096.0
    assert rd["dependent_seconds"] > 0 and rd["independent_seconds"] > 0 and rd["ratio"] > 0
    mm = rep["modmul"]  # mul_mod's float64 quotient against the long double one, in the same run, equal results
    assert mm["field_bits"] == rep["rows"][1]["field_bits"] and mm["values"] == 2_000_000
    assert mm["mul_mod_seconds"] > 0 and mm["long_double_seconds"] > 0 and mm["ratio"] > 0
    assert (tmp_path / "bgw.png").stat().st_size > 0
    # per party: process start, connect, the protocol's phases, the rest of the program, output; in order
    from bench.bgw_cost import CONNECT, OTHER, OUTPUT, PROTOCOL_PHASES, START, TOTAL

    for r in rep["rows"]:
        assert len(r["party_phases"]) == len(r["party_timelines"]) == 3 and r["heavy_modules"] == [[], [], []]
        for i, (ph, tl) in enumerate(zip(r["party_phases"], r["party_timelines"], strict=False)):
            assert {START, CONNECT, "exchange input shares", "degree reduction", "open result", OTHER, OUTPUT,
                    TOTAL} <= set(ph)
            assert ("client checks" in ph) == (i > 0)  # the clients check each other, the server has no input
            assert all(v >= 0 for k, v in ph.items() if k != OTHER)
            steps = ["spawned", "started", "main", "unpickled", "ready", "connected", "agreed", "finished", "closed",
                     "writing", "exited", "collected"]
            assert list(tl) == steps and tl["spawned"] == 0  # seconds since spawned, in the order they happened
            assert all(tl[a] <= tl[b] for a, b in zip(steps, steps[1:], strict=False))
            assert list(ph)[:2] == [START, CONNECT] and list(ph)[-3:] == [OTHER, OUTPUT, TOTAL]
            assert [k for k in ph if k in PROTOCOL_PHASES] == [k for k in PROTOCOL_PHASES if k in ph]
            assert abs(sum(v for k, v in ph.items() if k != TOTAL) - ph[TOTAL]) < 1e-6
            assert abs(tl["collected"] - ph[TOTAL]) < 1e-6
        assert r["launcher_before_spawn_seconds"] >= 0 and r["launcher_after_collect_seconds"] >= 0
    assert len(rep["stock_party_phases"]) == 3 and all(p[START] > 0 for p in rep["stock_party_phases"])
