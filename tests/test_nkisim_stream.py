"""The kernel's program as plain data (``nkisim.stream``): recorded in one run (timing mode: no values), replayed in
another with its own inputs, the replay gives the same instructions (every field), the same trace metadata and the
same outputs as running the kernel itself; a malformed or forged stream is refused with an error naming the event.

Kernels: the staff references of the current API (checked against NumPy elsewhere: tests/test_reference_solutions.py)
and small kernels of our own for what the references do not use (dynamic loops, registers, run-time offsets,
instruction handles, item assignment, gathers)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest
from nkisim_util import load_repo_module

from nkisim import stream
from nkisim.core.runtime import run_kernel

PART1 = load_repo_module("grader/reference/part1/kernels.py", "stream_ref_part1")
CONV = load_repo_module("grader/reference/part2/conv2d.py", "stream_ref_conv")
RELAXED = load_repo_module("grader/reference/relaxed/part2/conv2d.py", "stream_ref_relaxed")


def _fields(trace) -> list:
    return [[getattr(i, k) for k in i.__slots__] for i in trace.instrs]


def _outputs(run) -> tuple:
    return run.outputs if isinstance(run.outputs, tuple) else (run.outputs,)


def _roundtrip(kernel, args, kwargs=None, target=None):
    """Run the kernel, record its stream in a timing run, ship it as JSON and replay it on fresh copies."""
    direct = run_kernel(kernel, [a.copy() for a in args], dict(kwargs or {}), target=target)
    data, rec = stream.record(kernel, [a.copy() for a in args], dict(kwargs or {}), target=target)
    assert rec.outputs is None  # the recording run computed no values
    shipped = stream.loads(stream.dumps(data))
    replayed = stream.replay(shipped, [a.copy() for a in args], dict(kwargs or {}))
    return direct, replayed


def _same(direct, replayed) -> None:
    assert _fields(replayed.trace) == _fields(direct.trace)
    assert replayed.trace.meta == direct.trace.meta
    assert (replayed.peak_sbuf_bytes, replayed.peak_psum_bytes) == (direct.peak_sbuf_bytes, direct.peak_psum_bytes)
    for got, want in zip(_outputs(replayed), _outputs(direct), strict=True):
        np.testing.assert_array_equal(got, want)


RNG = np.random.default_rng(7)


@pytest.mark.parametrize("name,shape", [("vector_add_naive", (128,)), ("vector_add_tiled", (512,)),
                                        ("vector_add_stream", (128 * 1024,))])
def test_staff_vector_adds_replay_exactly(name, shape):
    a, b = (RNG.standard_normal(shape).astype(np.float32) for _ in range(2))
    direct, replayed = _roundtrip(getattr(PART1, name), (a, b))
    _same(direct, replayed)
    np.testing.assert_allclose(_outputs(replayed)[0], a + b, rtol=1e-6)


@pytest.mark.parametrize("target", ["trn1", "trn2"])
def test_staff_transpose_replays_exactly(target):
    x = RNG.standard_normal((512, 1024)).astype(np.float32)
    direct, replayed = _roundtrip(PART1.matrix_transpose, (x,), target=target)
    _same(direct, replayed)
    np.testing.assert_array_equal(_outputs(replayed)[0], x.T)


@pytest.mark.parametrize("mod", [CONV, RELAXED], ids=["reference", "relaxed"])
@pytest.mark.parametrize("case", [(1, 128, 128, 16, 16, 1, np.float32), (2, 256, 128, 32, 16, 2, np.float16),
                                  (1, 128, 256, 15, 17, 2, np.float32)], ids=["f32", "f16-pool", "odd-pool"])
def test_staff_conv2d_replays_exactly(mod, case):
    b, ci, co, h, w, pool, dt = case
    x = RNG.standard_normal((b, ci, h, w)).astype(dt)
    wt = (RNG.standard_normal((co, ci, 3, 3)) * 0.1).astype(dt)
    bias = RNG.standard_normal(co).astype(dt)
    direct, replayed = _roundtrip(mod.fused_conv2d_maxpool, (x, wt, bias), {"pool_size": pool})
    _same(direct, replayed)


@pytest.mark.parametrize("dt", [np.float32, np.float16])
def test_hbm_tensors_in_files_replay_exactly_and_an_output_is_its_file(tmp_path, monkeypatch, dt):
    """``hbm_dir`` (the grader's replays, grader/child.py, which rename an output's file instead of copying it):
    the run's HBM tensors are .npy files there, and the outputs, trace and peaks are a replay's in memory; an
    output is the whole data of its file, whose bytes are np.save's.  A tensor past the file size limit or the
    run's budget of file bytes is memory."""
    from nkisim.core import buffers

    monkeypatch.setattr(buffers, "HBM_FILE_BYTES", 0)  # this small case's output is under the 1 MiB threshold
    x = RNG.standard_normal((2, 128, 32, 16)).astype(dt)
    wt = (RNG.standard_normal((128, 128, 3, 3)) * 0.1).astype(dt)
    bias = RNG.standard_normal(128).astype(dt)
    args, kwargs = (x, wt, bias), {"pool_size": 2}
    direct, replayed = _roundtrip(CONV.fused_conv2d_maxpool, args, kwargs)
    shipped = stream.loads(stream.dumps(stream.record(CONV.fused_conv2d_maxpool, [a.copy() for a in args],
                                                      dict(kwargs))[0]))
    filed = stream.replay(shipped, [a.copy() for a in args], dict(kwargs), hbm_dir=str(tmp_path))
    _same(direct, filed)
    out = _outputs(filed)[0]
    path = buffers.hbm_file(out)
    assert path is not None and Path(path).parent == tmp_path
    np.save(tmp_path / "want.npy", _outputs(direct)[0])
    assert Path(path).read_bytes() == (tmp_path / "want.npy").read_bytes()
    assert buffers.hbm_file(_outputs(replayed)[0]) is None  # no hbm_dir: memory
    # the next run in the same directory leaves the earlier output's file alone
    again = stream.replay(shipped, [a.copy() for a in args], dict(kwargs), hbm_dir=str(tmp_path))
    assert buffers.hbm_file(_outputs(again)[0]) != path
    np.testing.assert_array_equal(np.load(path), _outputs(direct)[0])
    for limit in ("_file_size_limit", "HBM_FILES_BUDGET"):
        with monkeypatch.context() as m:
            m.setattr(buffers, limit, (lambda: 0) if limit == "_file_size_limit" else 0)
            limited = stream.replay(shipped, [a.copy() for a in args], dict(kwargs), hbm_dir=str(tmp_path))
        _same(direct, limited)
        assert buffers.hbm_file(_outputs(limited)[0]) is None


@nki.jit
def half_written(x):
    """Stores x into the first columns of its output: the rest is never written (reads the HBM poison)."""
    out = nl.ndarray((128, 4096), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    nl.store(out[:, 0:512], value=t)
    return out


def test_a_prepared_hbm_file_is_taken_as_a_fresh_poisoned_tensor(tmp_path):
    """A caller (the grader's group replays) may prepare a poisoned file for an HBM tensor it knows the run makes
    (``buffers.write_ready_file`` under ``buffers.ready_file_name``): the first tensor of that shape and dtype that
    gets a file takes it (renamed to the tensor's own name) as it is, without a second fill, so the run's values
    are the same as with a fresh file -- the part the kernel never writes still reads the poison -- and the file's
    bytes are np.save's of the output.  A prepared file whose array is not of its name's shape and dtype is
    dropped, never used."""
    from nkisim.core import buffers

    x = RNG.standard_normal((128, 512)).astype(np.float32)
    want = run_kernel(half_written, [x.copy()])
    assert np.isnan(want.outputs[:, 512:]).all()
    ready = tmp_path / buffers.ready_file_name((128, 4096), np.float32)
    buffers.write_ready_file(str(ready), (128, 4096), np.float32)
    assert ready.exists() and not list(tmp_path.glob("*.tmp"))
    np.save(tmp_path / "poisoned.npy", np.full((128, 4096), np.nan, np.float32))
    assert ready.read_bytes() == (tmp_path / "poisoned.npy").read_bytes()
    inode = ready.stat().st_ino
    got = run_kernel(half_written, [x.copy()], hbm_dir=str(tmp_path))
    np.testing.assert_array_equal(got.outputs, want.outputs)
    path = buffers.hbm_file(got.outputs)
    assert path is not None and Path(path).stat().st_ino == inode and not ready.exists()
    np.save(tmp_path / "want.npy", want.outputs)
    assert Path(path).read_bytes() == (tmp_path / "want.npy").read_bytes()
    # taken as it is: a prepared file's own NaN payload (here another NaN than the poison) is not filled over
    marked = np.lib.format.open_memmap(ready, mode="w+", dtype=np.float32, shape=(128, 4096))
    marked.view(np.uint32)[:] = 0x7FC00001
    del marked
    taken = run_kernel(half_written, [x.copy()], hbm_dir=str(tmp_path))
    assert (taken.outputs[:, 512:].view(np.uint32) == 0x7FC00001).all()
    np.testing.assert_array_equal(taken.outputs[:, :512], x)
    # without a prepared file the tensor's own file is made and filled, as before
    again = run_kernel(half_written, [x.copy()], hbm_dir=str(tmp_path))
    assert (again.outputs[:, 512:].view(np.uint32) == want.outputs[:, 512:].view(np.uint32)).all()
    assert buffers.hbm_file(again.outputs) is not None
    # a file under a ready name that holds another array: dropped, and the tensor gets a fresh, filled file
    np.save(ready, np.zeros((128, 512), np.float32))
    forged = run_kernel(half_written, [x.copy()], hbm_dir=str(tmp_path))
    np.testing.assert_array_equal(forged.outputs, want.outputs)
    assert not ready.exists() and buffers.hbm_file(forged.outputs) is not None


# ---- what the staff kernels do not use -------------------------------------------------------------------------
@nki.jit
def loops_and_registers(x, counts):
    """A while loop over a loaded register, a fori_loop with a register bound, a dynamic_range with a run-time
    scalar offset view, an immediate register, instruction handles with depends_on, and a no_reorder block."""
    rows, cols = x.shape
    out = nl.ndarray((rows, cols), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((1, cols), dtype=nl.float32, buffer=nl.sbuf)
    zero = nisa.memset(dst=acc, value=0.0)
    cnt = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    load = nisa.dma_copy(dst=cnt, src=counts)
    load.depends_on(zero)
    one = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=one, value=1)
    reg = nisa.register_alloc()
    nisa.register_load(reg, cnt)
    row = nl.ndarray((1, cols), dtype=nl.float32, buffer=nl.sbuf)

    def body(r):
        nisa.dma_copy(dst=row, src=x.ap([[cols, 1], [1, cols]], scalar_offset=r, indirect_dim=0))
        nisa.tensor_tensor(dst=acc, data1=acc, data2=row, op=nl.add)
        nisa.tensor_tensor(dst=cnt, data1=cnt, data2=one, op=nl.subtract)
        nisa.register_load(r, cnt)
        return r

    nl.while_loop(reg, body)
    bound = nisa.register_alloc(rows)

    def copy_row(i):
        t = nl.ndarray((1, cols), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x.ap([[cols, 1], [1, cols]], scalar_offset=i, indirect_dim=0))
        nisa.tensor_tensor(dst=t, data1=t, data2=acc, op=nl.add)
        nisa.dma_copy(dst=out.ap([[cols, 1], [1, cols]], scalar_offset=i, indirect_dim=0), src=t)

    nl.fori_loop(0, bound, copy_row)
    for i in nl.dynamic_range(1):  # a no_reorder block inside the body: AWS's docs refuse one around a dynamic loop
        with nl.no_reorder():
            nisa.dma_copy(dst=row, src=x.ap([[cols, 1], [1, cols]], scalar_offset=i, indirect_dim=0))
    return out


@pytest.mark.parametrize("count", [0, 3])
@pytest.mark.filterwarnings("ignore:nl.dynamic_range loops are deprecated")
def test_dynamic_loops_registers_and_handles_replay_exactly(count):
    x = RNG.standard_normal((4, 8)).astype(np.float32)
    counts = np.array([[count]], np.int32)
    direct, replayed = _roundtrip(loops_and_registers, (x, counts))
    _same(direct, replayed)
    np.testing.assert_allclose(_outputs(replayed)[0], x + x[1:count + 1].sum(axis=0), rtol=1e-5)
    assert any("after" in i.attrs for i in replayed.trace.instrs)
    assert any(i.attrs.get("in_order") for i in replayed.trace.instrs)


@nki.jit
def assign_gather_cast(table, idx):
    """Item assignment retargeting a fresh result, a vector_select gather, astype and broadcast_to methods."""
    out = nl.ndarray((4, 8), dtype=nl.float32, buffer=nl.shared_hbm)
    ix = nl.ndarray((4, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=ix, src=idx)
    rows = nl.ndarray((4, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=rows, src=table.vector_select(0, ix))
    half = rows.astype(nl.float16)
    back = nl.ndarray((4, 8), dtype=nl.float32, buffer=nl.sbuf)
    back[...] = nl.copy(half, dtype=nl.float32)
    first = back[0:1, :].broadcast_to((4, 8))
    total = nl.ndarray((4, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=total, data1=back, data2=first, op=nl.add)
    nisa.dma_copy(dst=out, src=total)
    return out


def test_item_assignment_gathers_and_tensor_methods_replay_exactly():
    table = RNG.standard_normal((16, 8)).astype(np.float32)
    idx = np.array([[3], [0], [15], [7]], np.int32)
    direct, replayed = _roundtrip(assign_gather_cast, (table, idx))
    _same(direct, replayed)
    rows = table[idx[:, 0]].astype(np.float16).astype(np.float32)
    np.testing.assert_allclose(_outputs(replayed)[0], rows + rows[0:1], rtol=1e-6)


@nki.jit
def rebinding_loop(x):
    """Each iteration binds a new 120 KiB-per-partition tile to ``t`` while the previous one is still bound: two do
    not fit in SBUF, and the capacity check reclaims the old one because the kernel never reads it again
    (core.liveness, from the kernel's frames, which a replay does not have)."""
    out = nl.ndarray((3, 128, 30720), dtype=nl.float32, buffer=nl.shared_hbm)
    for i in range(3):
        t = nl.ndarray((128, 30720), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[i])
        nisa.dma_copy(dst=out[i], src=t)
    return out


def test_tiles_the_capacity_check_found_dead_are_reclaimed_in_the_replay_too():
    x = RNG.standard_normal((3, 128, 30720)).astype(np.float32)
    direct, replayed = _roundtrip(rebinding_loop, (x,))
    assert "spill" not in direct.trace.meta  # reclaimed, not spilled
    _same(direct, replayed)
    np.testing.assert_array_equal(_outputs(replayed)[0], x)


@nki.jit
def halves(x):
    """Program ``p`` of a two-program grid adds ``p`` to its half of the rows (shared output)."""
    p = nl.program_id(0)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[p * 128:(p + 1) * 128, :])
    nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=float(p))
    nisa.dma_copy(dst=out[p * 128:(p + 1) * 128, :], src=t)
    return out


def test_an_lnc2_launch_is_not_recorded():
    """kernel[2] runs its two programs in lockstep (core.lockstep), which one sequential stream cannot express."""
    x = RNG.standard_normal((256, 4)).astype(np.float32)
    with pytest.raises(stream.NotRecordable, match="LNC=2"):
        stream.record(halves[2], (x,))


def test_a_forged_reclaim_buys_no_capacity():
    """A stream that declares a tile dead at a capacity check and uses it afterwards is refused (the replay has the
    whole program: a reclaimed tile is never read again)."""
    x = RNG.standard_normal((3, 128, 30720)).astype(np.float32)
    data, _ = stream.record(rebinding_loop, (x,))
    forged = copy.deepcopy(data)
    reclaims = [e for e in forged["events"] if e[0] == "reclaim"]
    assert reclaims
    out_aid = _call_events(forged)[0][6][1]  # the output tensor, written in every iteration
    reclaims[0][1].append(out_aid)
    with pytest.raises(stream.StreamError, match="found it dead"):
        stream.replay(forged, (x,))


def test_the_replay_uses_its_own_inputs():
    """The stream holds no data: replayed on other inputs, the program computes on those."""
    a, b = (RNG.standard_normal(128).astype(np.float32) for _ in range(2))
    data, _ = stream.record(PART1.vector_add_naive, (a, b))
    c, d = (RNG.standard_normal(128).astype(np.float32) for _ in range(2))
    run = stream.replay(stream.loads(stream.dumps(data)), (c, d))
    np.testing.assert_allclose(run.outputs, c + d, rtol=1e-6)
    assert "values" not in json.dumps(data) and len(stream.dumps(data)) < 16_000


# ---- malformed and forged streams ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def naive():
    a, b = (RNG.standard_normal(128).astype(np.float32) for _ in range(2))
    data, _ = stream.record(PART1.vector_add_naive, (a, b))
    return stream.loads(stream.dumps(data)), (a, b)


def _call_events(s):
    return [e for e in s["events"] if e[0] == "call"]


def _forge(s, change):
    s = copy.deepcopy(s)
    change(s)
    return s


@pytest.mark.parametrize("change,message", [
    (lambda s: s["functions"].__setitem__(0, "os:system"), "not a function of the kernel's front end"),
    (lambda s: s["functions"].__setitem__(0, "nkisim.core.runtime:run_kernel"), "not a function"),
    (lambda s: s["views"][0].__setitem__(4, 1 << 30), "outside its"),
    (lambda s: [v.__setitem__(slice(2, 4), [[64, 1], [8, 4]]) for v in s["views"] if len(v[2]) == 2], "partition"),
    (lambda s: s["events"].insert(len(s["events"]) - 2, ["drop", 3]), "dropped"),
    (lambda s: s["events"].insert(0, ["fly", 1]), "unknown event"),
    (lambda s: s.__setitem__("names", ["a", "b; import os"]), "argument names"),
    (lambda s: s.__setitem__("kernel", "k(): pass\nimport os\ndef k"), "kernel name"),
    (lambda s: s["consts"].append(["L", "nkisim.core.runtime:run_kernel"]) or _call_events(s)[0][3].append(
        ["x", ["c", len(s["consts"]) - 1]]), "unknown library object"),
    (lambda s: s["events"].pop(), "without the kernel's return"),
    # values the replay's caches could answer (a rebuilt view, a decoded constant, a statement's site, an
    # instruction's handle) are checked whatever those caches hold (_dec, _stmt, _bind_result)
    (lambda s: _call_events(s)[-1][3][0].__setitem__(1, ["c", len(s["consts"])]), "malformed constant"),
    (lambda s: _call_events(s)[-1][3][0].__setitem__(1, ["c", True]), "malformed constant"),
    (lambda s: _call_events(s)[-1][3][0].__setitem__(1, ["T", True, 0]), "malformed tensor"),
    (lambda s: _call_events(s)[-1][3][0].__setitem__(1, {"T": 1}), "malformed value"),
    (lambda s: _call_events(s)[-1].__setitem__(4, [len(s["codes"]), 1]), "malformed statement"),
    (lambda s: _call_events(s)[-1].__setitem__(4, [0, True]), "malformed statement"),
    (lambda s: _call_events(s)[-1].__setitem__(6, ["H", "1"]), "no instruction handle"),
    (lambda s: [e.__setitem__(6, ["H", 7]) for e in _call_events(s) if e[6] and e[6][0] == "T"], "no instruction "
     "handle"),
])
def test_a_forged_or_malformed_stream_is_refused_naming_the_problem(naive, change, message):
    s, args = naive
    with pytest.raises(stream.StreamError, match=message):
        stream.replay(_forge(s, change), args)


def test_a_stream_for_other_arguments_is_refused(naive):
    s, (a, _) = naive
    with pytest.raises(stream.StreamError, match="arguments"):
        stream.replay(s, (a,))
    with pytest.raises(stream.StreamError, match="format"):
        stream.loads(b'{"format": "pickle"}')
    with pytest.raises(stream.StreamError, match="JSON"):
        stream.loads(b"\x80\x04K\x01.")


def test_an_instruction_made_outside_the_recorded_calls_stops_the_recording():
    """Nothing reaches the trace without a record: an unrecorded instruction would be missing from the replay."""
    from nkisim.core.ops import elementwise

    @nki.jit
    def sneaky(a):
        out = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.sbuf)
        elementwise.memset_dst(t, 0.0)  # the core's builder, not the front end's recorded call
        nisa.dma_copy(dst=out, src=t)
        return out

    with pytest.raises(stream.NotRecordable, match="memset .* outside the calls"):
        stream.record(sneaky, (np.zeros((128, 4), np.float32),))


def test_a_current_api_stream_cannot_name_the_legacy_front_end(naive):
    """The header's front end decides which functions and objects a stream may name (both are recorded:
    tests/test_nkisim_stream_legacy.py): a current-API stream calling a legacy function is refused."""
    s, args = naive
    forged = _forge(s, lambda s: s["functions"].__setitem__(0, "nkisim.frontends.legacy.isa:dma_copy"))
    with pytest.raises(stream.StreamError, match="not a function of the kernel's front end"):
        stream.replay(forged, args)


SEEN: list = []  # many_views' (strided_key, view_state) pairs


@nki.jit
def many_views(x, idx):
    """Views of every kind the recorder meets: slices and integers (partition and free axes, HBM and on chip),
    reshapes, permutes, dtype views (tfloat32 included), explicit patterns, a run-time offset and a gather."""
    from nkisim.core import aps

    out = nl.ndarray((4, 8), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((4, 2, 8), dtype=nl.float32, buffer=nl.sbuf)
    ix = nl.ndarray((4, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=ix, src=idx)
    views = [t, t[:, 1, :], t[1:3, 0, 2:6], t[0], t[:, :, 3], t[2:4], t.reshape((4, 16)), t.permute((0, 2, 1)),
             t.view(nl.int32), t.view(nl.tfloat32)[:, 0, :], t.ap([[16, 4], [1, 8]]), x, x[1], x[0:2, 3:5],
             x.reshape((128,))[4:20], x.vector_select(0, ix),
             t.ap([[16, 4], [1, 8]], scalar_offset=ix[0:1, 0:1], indirect_dim=1)]
    for v in views:
        SEEN.append((aps.strided_key(v), _state_or_error(aps.view_state, v)))
    nisa.dma_copy(dst=t[:, 0, :], src=x[0:4, :])
    nisa.dma_copy(dst=out, src=t[:, 0, :])
    return out


def _state_or_error(f, v):
    try:
        return f(v)
    except NotImplementedError as exc:
        return exc


def test_the_recorders_view_key_is_the_view_states_fields():
    """``aps.strided_key`` (the recorder's per-argument key) is exactly the fields of ``aps.view_state``'s strided
    state, and None for every view whose state is not a strided one: the view table a stream holds does not depend
    on which of the two the recorder used."""
    SEEN.clear()
    run_kernel(many_views, [RNG.standard_normal((16, 8)).astype(np.float32), np.zeros((4, 1), np.int32)],
               mode="timing")
    seen = list(SEEN)
    assert len(seen) == 17
    kinds = []
    for key, state in seen:
        if isinstance(state, tuple) and state[0] == "v":
            assert key == (state[1], tuple(state[2]), tuple(state[3]), state[4], state[5])
            assert [type(f) for f in key[3:]] == [int, int]
        else:
            assert key is None, state
        kinds.append(state[0] if isinstance(state, tuple) else "error")
    assert {"v", "g", "dyn"} <= set(kinds)
    assert ("tfloat32", (4, 8), (64, 4), 0, 0) in [k for k, _ in seen]


@nki.jit
def views_as_arguments(x):
    """On-chip views of several kinds passed to recorded calls, each twice (the second meets the first's Operand):
    slices, integers on free axes, reshapes, permutes, a tfloat32 view, an explicit pattern, and two tiles of one
    site rotating through their physical buffers."""
    out = nl.ndarray((4, 16), dtype=nl.float32, buffer=nl.shared_hbm)
    for _ in nl.affine_range(3):
        t = nl.ndarray((4, 2, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t[:, 0, :], src=x[0:4, 0:8])
        nisa.dma_copy(dst=t[:, 1, :], src=x[4:8, 0:8])
        for _rep in range(2):
            for v in (t[:, 1, :], t[:, 0, 2:6], t[:, :, 3], t.reshape((4, 16)), t.permute((0, 2, 1)),
                      t.view(nl.tfloat32)[:, 0, :], t.ap([[16, 4], [1, 8]]), t[0:2, 1, :]):
                nisa.dma_copy(dst=v, src=v)
        nisa.dma_copy(dst=out, src=t.reshape((4, 16)))
    return out


class _Forgetful(dict):
    """A table that keeps nothing: the recorder's Operand shortcut never hits."""

    def __setitem__(self, key, value) -> None:
        pass


@pytest.mark.parametrize("case", ["views", "conv", "legacy-conv"])
def test_the_recorders_operand_shortcut_writes_the_stream_its_view_states_give(case, monkeypatch):
    """The recorder finds an on-chip strided view's table entry by its interned Operand (``Recorder._op_views``:
    ``access.make_operand``'s key determines ``aps.strided_key``'s fields); the stream is byte for byte the one
    it writes from each view's own state (the shortcut off), and the shortcut does hit."""
    if case == "views":
        kernel, args, kwargs = views_as_arguments, [RNG.standard_normal((8, 8)).astype(np.float32)], {}
    else:
        mod = CONV if case == "conv" else load_repo_module("grader/reference/legacy/part2/conv2d.py",
                                                           "stream_legacy_conv")
        kernel = mod.fused_conv2d_maxpool
        args = [np.zeros((1, 256, 10, 12), np.float32), np.zeros((256, 256, 3, 3), np.float32),
                np.zeros(256, np.float32)]
        kwargs = {"pool_size": 2}
    hits = []
    real_init = stream.Recorder.__init__

    def counting_init(self) -> None:
        real_init(self)
        table = self._op_views

        class Counting(dict):
            def get(self, key, default=None):
                got = dict.get(self, key, default)
                hits.append(got is not None)
                return got
        self._op_views = Counting(table)

    from nkisim.core import context

    first_loop = context._LOOP_IDS[0]  # symbolic loops are numbered per process: both recordings start here
    monkeypatch.setattr(stream.Recorder, "__init__", counting_init)
    data, recorded = stream.record(kernel, [a.copy() for a in args], dict(kwargs))
    fast = stream.dumps(data)
    # the Operands the recorder takes before a call are the ones the call's instruction records
    plain = run_kernel(kernel, [a.copy() for a in args], dict(kwargs), mode="timing")
    assert _fields(recorded.trace) == _fields(plain.trace)
    assert sum(hits) >= (len(hits) // 2 if case == "views" else 1)

    def forgetful_init(self) -> None:
        real_init(self)
        self._op_views = _Forgetful()

    monkeypatch.setattr(stream.Recorder, "__init__", forgetful_init)
    context._LOOP_IDS[0] = first_loop
    data, _ = stream.record(kernel, [a.copy() for a in args], dict(kwargs))
    assert stream.dumps(data) == fast
