"""python -m nkisim.calibrate: row parsing, statistics, order check, and a run on the cheap rows."""

from __future__ import annotations

from nkisim.calibrate import Result, main, order_violations, statistics_of
from nkisim.calibration.rows import CalRow, load_rows


def _row(rid, measured, group="g", role="training"):
    return CalRow(rid, "trn2", "k", {}, lambda: (), measured, "nc_latency", None, role, group)


def test_rows_cover_every_training_measurement():
    rows = {r.id: r for r in load_rows()}
    for rid in ("t2-tiled-1", "t2-stream-256k-1000", "t1-direct-256k", "doc-mm-bf16-trn1", "doc-mm-fp32-trn2"):
        assert rows[rid].role == "training"
    assert rows["t2-stream-256k-2000"].metric == "total_time" and rows["t2-stream-256k-2000"].dge is False
    assert rows["t2-tiled-1"].metric == "nc_latency" and rows["t2-tiled-1"].kwargs == {"ROW_CHUNK": 1}
    assert rows["t1-stream-10"].kernel == "vector_add_stream_2024"
    assert all(r.role == "reference threshold" for r in rows.values() if r.id.startswith("ref-"))


def test_statistics_and_order_check():
    res = [
        Result(_row("a", 100.0), 110.0, 0, 1),
        Result(_row("b", 10.0), 15.0, 0, 1),
        Result(_row("c", 10.05), 9.0, 0, 1),  # tie with b (within 1%): no order imposed
        Result(_row("d", 1000.0), 90.0, 0, 1),  # out of order with a and b
        Result(_row("e", 1.0, role="reference threshold"), 100.0, 0, 1),
    ]
    checked, bad = order_violations(res)
    assert bad == [("a", "d")]  # b < d holds in both; b vs c is a tie
    st = statistics_of(res)
    assert st["training_rows"] == 4
    assert st["worst_row"] == "d" and st["within_2x"] == 3
    c_err = (1 - 9.0 / 10.05) * 100
    assert abs(st["median_abs_pct_error"] - (c_err + 50) / 2) < 1e-9


def test_calibrate_cli_on_cheap_rows(capsys):
    assert main(["--rows", "t2-stream-200,t2-stream-256k-*,t1-stream-200", "-q"]) == 0
    out = capsys.readouterr().out
    assert "t2-stream-256k-1000" in out and "median absolute error" in out
    assert "same-kernel order: 3/3 pairs in order" in out
