"""sqm bench bgw-cost at a tiny shape: the report the issue names, through real MPyC processes."""
import json

from apps.cli import main


def test_bgw_cost_report_and_stock_comparison(tmp_path):
    out = tmp_path / "bgw.json"
    assert main(["bench", "bgw-cost", "--rows", "300", "--cols", "6", "--gammas", "64,4096",
                 "--stock-rows", "60", "--json", str(out), "--plot", str(tmp_path / "bgw.png")]) == 0
    doc = json.loads(out.read_text())  # apps.output: the table's rows as results, the report as details
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
    assert (tmp_path / "bgw.png").stat().st_size > 0
