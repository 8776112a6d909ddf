"""Trace files, Perfetto JSON, the text summary and the profile CLI (hand-built traces)."""

from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import pytest

from nkisim.core import traceio
from nkisim.core.instr import Engine, Instr
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


def _row_by_row(data: bytes) -> list[tuple]:
    """What a trace file's instructions hold, read one operand row at a time: (seq, op, engine, srcs, dsts, attrs,
    where) per instruction, and which operands are one object (equal rows share one)."""
    src = zipfile.ZipFile(io.BytesIO(data))
    cols = {n[:-4]: np.load(io.BytesIO(src.read(n)), allow_pickle=False) for n in src.namelist()}
    strings = json.loads(cols.pop("strings").tobytes())
    o = [cols[f"o_{k}"].tolist() for k in traceio._O_COLS]
    srcs = [[] for _ in cols["i_seq"]]
    dsts = [[] for _ in cols["i_seq"]]
    rows: dict[tuple, int] = {}
    for instr, role, *row in zip(*o, strict=True):
        (srcs if role == 0 else dsts)[instr].append(rows.setdefault(tuple(row), len(rows)))
    out = []
    ids: dict[int, int] = {}  # numbered by first use, as _as_read numbers objects
    for i, (seq, op, eng, where, attrs) in enumerate(zip(*(cols[f"i_{k}"].tolist() for k in traceio._I_COLS))):
        s_ids, d_ids = ([ids.setdefault(r, len(ids)) for r in rows] for rows in (srcs[i], dsts[i]))
        out.append((seq, strings["ops"][op], eng, s_ids, d_ids, json.loads(strings["attrs"][attrs]),
                    strings["wheres"][where]))
    return out


def _as_read(trace) -> list[tuple]:
    ids: dict[int, int] = {}
    out = []
    for i in trace.instrs:
        s_ids, d_ids = ([ids.setdefault(id(o), len(ids)) for o in ops] for ops in (i.srcs, i.dsts))
        out.append((i.seq, i.op, int(i.engine), s_ids, d_ids, i.attrs, i.where))
    return out


def _shuffled_roles(a: dict) -> None:
    """Each instruction's operand rows reversed (destinations before sources) and its first row repeated at its
    end as a source: a writer other than dump may order rows so within an instruction."""
    order, extra = [], []
    instr = a["o_instr"]
    for i in np.unique(instr):
        rows = np.flatnonzero(instr == i)
        order.extend(rows[::-1].tolist())
        order.append(int(rows[0]))
        extra.append(len(order) - 1)
    for k in list(a):
        if k.startswith("o_"):
            a[k] = a[k][order]
    a["o_role"][extra] = 0


@pytest.mark.parametrize("mix", [None, 0])
@pytest.mark.parametrize("shuffle", [False, True])
def test_load_builds_the_instructions_row_by_row_reading_gives(monkeypatch, mix, shuffle):
    """The operands are grouped by array work (distinct rows found by a 64-bit mix, checked against the rows: a
    mix of 0 makes every row collide, the bytes' grouping takes over) and dealt to instructions by (instruction,
    role): the same instructions, operands and shared operand objects as reading the rows one by one."""
    if mix is not None:
        monkeypatch.setattr(traceio, "_MIX", mix)
    data = traceio.dumps(_trace())
    if shuffle:
        data = _mutate(data, "", _shuffled_roles)
    want = _row_by_row(data)
    got = traceio.loads(data)
    assert _as_read(got) == want
    assert len({id(o) for i in got.instrs for o in i.srcs + i.dsts}) == len({x for r in want for x in r[3] + r[4]})
    if shuffle:  # the shuffle made an instruction with the same operand row twice, as a source and a destination
        assert any(set(r[3]) & set(r[4]) for r in want)


def test_a_trace_loaded_again_is_a_clone_that_shares_nothing_mutable(tmp_path):
    """traceio.load's ``seen``: the same bytes again are not parsed but cloned: equal instructions, no instruction
    or attrs dict or meta in common (the cost model and the grader write into them), the same estimate."""
    p, q = tmp_path / "a.trace", tmp_path / "b.trace"
    traceio.dump(_trace(), p)
    q.write_bytes(p.read_bytes())
    seen: dict = {}
    first = traceio.load(p, seen=seen)
    parsed = []
    real = traceio.loads
    try:
        traceio.loads = lambda data: parsed.append(data) or real(data)
        second = traceio.load(q, seen=seen)
        assert parsed == []
        other = tmp_path / "c.trace"
        traceio.dump(_trace(), other)
        other.write_bytes(other.read_bytes())
        tr = _trace()
        tr.meta["x"] = 1
        traceio.dump(tr, other)
        traceio.load(other, seen=seen)
        assert len(parsed) == 1  # other bytes are parsed
    finally:
        traceio.loads = real
    assert _as_read(second) == _as_read(first) and second.meta == first.meta
    assert (second.target, second.kernel_name) == (first.target, first.kernel_name)
    for a, b in zip(first.instrs, second.instrs, strict=True):
        assert a is not b and a.attrs is not b.attrs and a.srcs == b.srcs and a.dsts == b.dsts
    assert second.meta is not first.meta
    report = estimate(second).total_us
    assert report == estimate(first).total_us
    second.instrs[0].attrs["bytes"] = -1
    second.meta["additional_compile_opt"] = ""
    assert "bytes" not in first.instrs[0].attrs or first.instrs[0].attrs["bytes"] != -1
    assert first.meta["additional_compile_opt"] == "--disable-dge"


def test_dump_columns_hold_the_instructions_in_order():
    """dump's columns, as the loader reads them: each instruction's op, engine, where and attrs through tables in
    order of first appearance (a repeated op, attrs equal but for a value's class: 1 and True, a list value), and
    one operand row per source then destination of each instruction, in order."""
    tr = _trace()
    tb_instrs = tr.instrs
    first = tb_instrs[0]
    tr.instrs = [*tb_instrs, *[Instr(first.seq + 100 + k, op, first.engine, first.dsts, first.srcs, attrs, where)
                               for k, (op, attrs, where) in enumerate([
                                   ("dma_copy", {"bytes": 1}, "k.py:3"), ("dma_copy", {"bytes": True}, "k.py:3"),
                                   ("iota", {"axes": [1, 2]}, "k.py:10"), ("dma_copy", {"bytes": 1}, "k.py:11"),
                                   ("iota", {"axes": [1, 2]}, "k.py:10")])]]
    arrays, strings = traceio._columns(tr)
    ins = tr.instrs
    assert strings["ops"] == list(dict.fromkeys(i.op for i in ins))
    assert strings["wheres"] == list(dict.fromkeys(i.where for i in ins))
    assert [strings["ops"][k] for k in arrays["i_op"]] == [i.op for i in ins]
    assert [strings["wheres"][k] for k in arrays["i_where"]] == [i.where for i in ins]
    assert arrays["i_seq"].tolist() == [i.seq for i in ins] and arrays["i_engine"].tolist() == [int(i.engine)
                                                                                                 for i in ins]
    got = [json.loads(strings["attrs"][k]) for k in arrays["i_attrs"]]
    assert got == [json.loads(json.dumps(i.attrs)) for i in ins]
    assert [type(a["bytes"]) for a in got[-5:-3]] == [int, bool]  # 1 and True: two entries
    assert len(strings["attrs"]) == len({json.dumps(i.attrs, sort_keys=True) for i in ins})
    rows = [(n, role, o) for n, i in enumerate(ins) for role, group in ((0, i.srcs), (1, i.dsts)) for o in group]
    assert arrays["o_instr"].tolist() == [n for n, _, _ in rows]
    assert arrays["o_role"].tolist() == [role for _, role, _ in rows]
    assert arrays["o_phys"].tolist() == [o.region.phys for _, _, o in rows]
    assert arrays["o_b_hi"].tolist() == [o.region.b_hi for _, _, o in rows]
    assert [strings["dtypes"][k] for k in arrays["o_dtype"]] == [o.dtype for _, _, o in rows]
    assert [tuple(strings["shapes"][k]) for k in arrays["o_shape"]] == [tuple(o.shape) for _, _, o in rows]
    assert _as_read(traceio.loads(traceio.dumps(tr)))[-5:] == _as_read(tr)[-5:]
