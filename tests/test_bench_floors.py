"""python -m bench bgw-cost --floors: each party's moments and exchange beside their physical floors, measured in the
same run (the plaintext float64 Gram, loopback TCP and TLS bandwidth), in the table and the JSON."""
import json

from bench.command import main


def test_floors_in_the_report(tmp_path, capsys):
    out = tmp_path / "bgw.json"
    assert main(["bgw-cost", "--rows", "300", "--cols", "6", "--gammas", "4096", "--stock-rows", "0",
                 "--floors", "--floor-mib", "4", "--json", str(out)]) == 0
    assert "x floor" in capsys.readouterr().out
    rep = json.loads(out.read_text())["details"]
    f = rep["floors"]
    assert f["gram_seconds"] > 0 and f["gram_all_threads_seconds"] > 0 and f["loopback_mib"] == 4
    assert f["loopback_bytes_per_s"] > 0 and f["loopback_tls_bytes_per_s"] > 0 and len(f["load_average"]) == 3
    row = rep["rows"][0]
    assert len(row["floor_ratios"]) == 3
    sent = row["bytes_per_party"]
    for i, (fr, ph) in enumerate(zip(row["floor_ratios"], row["party_phases"], strict=False)):
        waited = sent[i] if i else max(sent[1:])  # the server waits for the largest client's shares
        assert fr["exchange_floor_seconds"] == waited / f["loopback_bytes_per_s"]
        assert fr["exchange_tls_floor_seconds"] == waited / f["loopback_tls_bytes_per_s"]
        assert fr["exchange_ratio"] == ph["exchange input shares"] / fr["exchange_floor_seconds"]
        assert fr["moments_ratio"] == ph["local moments"] / f["gram_seconds"]


def test_loopback_bandwidth_moves_every_byte():
    from bench.bgw_cost import gram_floor, loopback_bandwidth
    import numpy as np

    assert loopback_bandwidth(3 << 20, repeat=1, chunk=1 << 16) > 0
    assert loopback_bandwidth(1 << 20, repeat=1, tls=True) > 0
    g = gram_floor(np.ones((50, 3)), threads=1, repeat=1)
    assert g["seconds"] > 0
