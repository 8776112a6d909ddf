"""Trace files, Perfetto JSON, the text summary and the profile CLI (hand-built traces)."""

from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import pytest

from nkisim.core import traceio
from nkisim.core.instr import Engine
from nkisim.perf import estimate
from nkisim.perf.profile_files import write_profile
from nkisim.perf.summary import format_summary, parse_summary
from nkisim.perf.synth import TraceBuilder


def _trace():
    tb = TraceBuilder("trn2", "demo")
    h = tb.hbm(128, 512)
    t = tb.sbuf(128, 512)
    tb.dma(h, t, where="k.py:3")
    w = tb.sbuf(128, 128, "bfloat16")
    ps = tb.psum(128, 512)
    tb.matmul(w, tb.sbuf(128, 512, "bfloat16"), ps, where="k.py:5")
    r = tb.sbuf(128, 512)
    tb.tensor_tensor(t, ps, r, where="k.py:6")
    tb.activation(r, tb.sbuf(128, 512), func="exp", where="k.py:7")
    tb.emit("iota", Engine.GPSIMD, [], [tb.sbuf(128, 64, "int32")], "k.py:8")
    tb.dma(r, tb.hbm(128, 512), where="k.py:9")
    tb.trace.meta["additional_compile_opt"] = "--disable-dge"
    return tb.trace


def test_trace_roundtrip_gives_same_estimate(tmp_path):
    tr = _trace()
    p = tmp_path / "t.trace"
    traceio.dump(tr, p)
    back = traceio.load(p)
    assert len(back) == len(tr) and back.target == "trn2" and back.kernel_name == "demo"
    assert back.meta["additional_compile_opt"] == "--disable-dge"
    for a, b in zip(tr.instrs, back.instrs):
        assert (a.seq, a.op, a.engine, a.srcs, a.dsts, a.where) == (b.seq, b.op, b.engine, b.srcs, b.dsts, b.where)
    assert estimate(back).total_us == estimate(tr).total_us
    assert estimate(back).dge is False


def _mutate(data: bytes, member: str, fn) -> bytes:
    src = zipfile.ZipFile(io.BytesIO(data))
    arrays = {n[:-4]: np.load(io.BytesIO(src.read(n)), allow_pickle=False) for n in src.namelist()}
    # dump writes each column in its narrowest signed dtype; a hostile writer may use any integer dtype
    arrays = {k: a.astype(np.int64) if k != "strings" else a for k, a in arrays.items()}
    fn(arrays)
    out = io.BytesIO()
    np.savez(out, **arrays)
    return out.getvalue()


@pytest.mark.parametrize(
    "mutation, message",
    [
        (lambda a: a.__setitem__("o_p_lo", a["o_p_lo"] - 10**6), "negative"),
        (lambda a: a.__setitem__("i_op", a["i_op"] + 100), "indexes outside"),
        (lambda a: a.__setitem__("i_engine", a["i_engine"] * 0 + 42), "engine"),
        (lambda a: a.__setitem__("o_itemsize", a["o_itemsize"] * 0 + 3), "itemsize"),
        (lambda a: a.__setitem__("o_buf", a["o_buf"] * 0 + 9), "buffer kind"),
        (lambda a: a.pop("o_phys"), "unexpected members"),
        (lambda a: a.__setitem__("o_instr", a["o_instr"][:-1]), "differ in length"),
        (lambda a: a.__setitem__("strings", np.frombuffer(b"{not json", np.uint8)), "JSON"),
        (lambda a: a.__setitem__("o_b_hi", a["o_b_lo"] - 1), "out of order"),
        (lambda a: a.__setitem__("i_seq", a["i_seq"].astype(np.float64)), "integer"),
        # uint64 columns are read as int64: a value past 2**63 is negative, not a huge unsigned index
        (lambda a: a.__setitem__("o_phys", a["o_phys"].astype(np.uint64) + np.uint64(2**63)), "negative"),
    ],
)
def test_load_rejects_malformed_traces(tmp_path, mutation, message):
    bad = _mutate(traceio.dumps(_trace()), "", mutation)
    with pytest.raises(ValueError, match=message):
        traceio.loads(bad)


def test_load_rejects_garbage_and_pickles(tmp_path):
    with pytest.raises(ValueError, match="npz"):
        traceio.loads(b"definitely not a zip")
    obj = io.BytesIO()
    np.savez(obj, **{k: np.array([object()], dtype=object) for k in ("i_seq",)})
    with pytest.raises(ValueError):
        traceio.loads(obj.getvalue())


def test_strings_attrs_validated():
    def bad_attrs(a):
        s = json.loads(a["strings"].tobytes())
        s["attrs"] = ['{"x": {"nested": 1}}'] * len(s["attrs"])
        a["strings"] = np.frombuffer(json.dumps(s).encode(), np.uint8)

    with pytest.raises(ValueError, match="attrs"):
        traceio.loads(_mutate(traceio.dumps(_trace()), "", bad_attrs))


def test_perfetto_json_has_tracks_and_complete_events(tmp_path):
    tr = _trace()
    rep = estimate(tr)
    files = write_profile(tr, rep, str(tmp_path / "prof"))
    doc = json.loads((tmp_path / "prof.ntff").read_text())
    evs = doc["traceEvents"]
    for e in evs:
        assert {"ts", "dur", "tid", "pid", "ph", "name"} <= set(e)
    names = {e["args"]["name"] for e in evs if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"TensorE", "VectorE", "ScalarE", "GpSimdE"} <= names
    assert {f"qDMA{q}" for q in range(16)} <= names
    x = [e for e in evs if e["ph"] == "X"]
    assert any(e["name"] == "nc_matmul" for e in x) and any(e["cat"] == "DMA" for e in x)
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in x)
    assert set(files) == {"neff", "ntff", "summary"}


def test_summary_parses_and_profile_cli(tmp_path, capsys):
    from nkisim import profile

    tr = _trace()
    rep = estimate(tr)
    text = format_summary(rep)
    m = parse_summary(text)
    assert m["total_time"] == pytest.approx(rep.total_us, abs=1e-3)
    assert m["dma_transfer_count"] == 2
    assert m["mfu_estimated_percent"] == pytest.approx(100 * rep.mfu, abs=1e-3)
    assert "tensor_active_time" in m and "dma_active_time_percent" in m
    write_profile(tr, rep, str(tmp_path / "p"))
    traceio.dump(tr, tmp_path / "raw.trace")
    for f in ("p.neff", "p.ntff", "p.summary.txt", "raw.trace"):
        assert profile.main(["summary", str(tmp_path / f)]) == 0
        out = parse_summary(capsys.readouterr().out)
        assert out["total_time"] == pytest.approx(rep.total_us, abs=1e-3), f
    assert profile.main(["trace", str(tmp_path / "p.neff"), "-o", str(tmp_path / "x.json")]) == 0
    assert json.loads((tmp_path / "x.json").read_text())["traceEvents"]
    (tmp_path / "junk.neff").write_text("hello")
    assert profile.main(["summary", str(tmp_path / "junk.neff")]) == 2
