"""The legacy API's program as plain data (``nkisim.stream``, the same recorder and replay as the current API's,
tests/test_nkisim_stream.py): recorded in a timing run, shipped as JSON and replayed on fresh inputs, a legacy
kernel gives the same instructions (every field), trace metadata, SBUF/PSUM peaks and outputs as running it; a
forged or malformed legacy stream is refused naming the event; what the stream cannot express is refused when
recording (``NotRecordable``), never replayed differently.

Kernels: the legacy staff references (grader/reference/legacy: part 1, conv2d and the relaxed conv, checked against
NumPy in tests/test_reference_solutions.py) on trn1 and trn2, the legacy kernels of tests/kernels and
tests/test_nkisim_legacy_api.py (each checked against NumPy there), and kernels of our own for what those do not
use (masks over ragged tails, out-of-bounds gathers a mask disables, operators, iota, loop_reduce, the 2024
``acc + nl.matmul`` spelling, SPMD grids over NeuronCores), checked against NumPy here."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import neuronxcc.nki as nki
import neuronxcc.nki.compiler as ncc
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np
import pytest
from nkisim_util import load_repo_module

from nkisim import stream
from nkisim.core.runtime import run_kernel

ROOT = Path(__file__).resolve().parents[1]



PART1 = load_repo_module("grader/reference/legacy/part1/kernels.py", "legacy_stream_ref_part1")
CONV = load_repo_module("grader/reference/legacy/part2/conv2d.py", "legacy_stream_ref_conv")
RELAXED = load_repo_module("grader/reference/legacy/relaxed/part2/conv2d.py", "legacy_stream_ref_relaxed")
VADD24 = load_repo_module("tests/kernels/vector_add_2024.py", "legacy_stream_vadd24")
MATMUL = load_repo_module("tests/kernels/matmul_tutorial.py", "legacy_stream_matmul")
RNG = np.random.default_rng(11)


def _fields(trace) -> list:
    return [[getattr(i, k) for k in i.__slots__] for i in trace.instrs]


def _outputs(run) -> tuple:
    return run.outputs if isinstance(run.outputs, tuple) else (run.outputs,)


def _roundtrip(kernel, args, kwargs=None, target=None):
    """Run the kernel, record its stream in a timing run, ship it as JSON and replay it on fresh copies."""
    direct = run_kernel(kernel, [a.copy() for a in args], dict(kwargs or {}), target=target)
    data, rec = stream.record(kernel, [a.copy() for a in args], dict(kwargs or {}), target=target)
    assert rec.outputs is None and data["frontend"] == "legacy"
    replayed = stream.replay(stream.loads(stream.dumps(data)), [a.copy() for a in args], dict(kwargs or {}))
    _same(direct, replayed)
    return direct, replayed


def _same(direct, replayed) -> None:
    assert _fields(replayed.trace) == _fields(direct.trace)
    assert replayed.trace.meta == direct.trace.meta
    assert (replayed.peak_sbuf_bytes, replayed.peak_psum_bytes) == (direct.peak_sbuf_bytes, direct.peak_psum_bytes)
    for got, want in zip(_outputs(replayed), _outputs(direct), strict=True):
        np.testing.assert_array_equal(got, want)


# ---- the staff references ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("target", ["trn1", "trn2"])
@pytest.mark.parametrize("name,shape", [("vector_add_naive", (128,)), ("vector_add_tiled", (512,)),
                                        ("vector_add_stream", (128 * 1024,))])
def test_staff_vector_adds_replay_exactly(name, shape, target):
    a, b = (RNG.standard_normal(shape).astype(np.float32) for _ in range(2))
    _, replayed = _roundtrip(getattr(PART1, name), (a, b), target=target)
    np.testing.assert_allclose(_outputs(replayed)[0], a + b, rtol=1e-6)


@pytest.mark.parametrize("target", ["trn1", "trn2"])
def test_staff_transpose_replays_exactly(target):
    x = RNG.standard_normal((512, 1024)).astype(np.float32)
    _, replayed = _roundtrip(PART1.matrix_transpose, (x,), target=target)
    np.testing.assert_array_equal(_outputs(replayed)[0], x.T)


@pytest.mark.parametrize("target", ["trn1", "trn2"])
@pytest.mark.parametrize("mod", [CONV, RELAXED], ids=["reference", "relaxed"])
@pytest.mark.parametrize("case", [(1, 128, 128, 16, 16, 1, np.float32), (2, 256, 128, 32, 16, 2, np.float16),
                                  (1, 128, 256, 15, 17, 2, np.float32)], ids=["f32", "f16-pool", "odd-pool"])
def test_staff_conv2d_replays_exactly(mod, case, target):
    b, ci, co, h, w, pool, dt = case
    x = RNG.standard_normal((b, ci, h, w)).astype(dt)
    wt = (RNG.standard_normal((co, ci, 3, 3)) * 0.1).astype(dt)
    bias = RNG.standard_normal(co).astype(dt)
    _roundtrip(mod.fused_conv2d_maxpool, (x, wt, bias), {"pool_size": pool}, target=target)


# ---- legacy kernels of the test suite (each checked against NumPy where it is defined) -------------------------
@pytest.mark.parametrize("target", ["trn1", "trn2"])
def test_2024_style_kernels_with_block_dimensions_and_direct_allocation_replay_exactly(target):
    a, b = (RNG.standard_normal(128 * 1000 * 4).astype(np.float32) for _ in range(2))
    _roundtrip(VADD24.vector_add_naive, (a[:128].reshape(128, 1).copy(), b[:128].reshape(128, 1).copy()),
               target=target)
    _roundtrip(VADD24.vector_add_tiled, (a[:512].copy(), b[:512].copy()), target=target)
    _roundtrip(VADD24.vector_add_stream, (a[:1024].copy(), b[:1024].copy()), target=target)
    for k in (VADD24.vector_add_direct_allocation, VADD24.vector_add_direct_allocation_bad):
        _, replayed = _roundtrip(k, (a, b), target=target)
    # the bad one aliases its tiles (spacing 0): the replay aliases them too, so its answer is as wrong
    assert not np.allclose(_outputs(replayed)[0].reshape(-1), a + b)


@pytest.mark.parametrize("target", ["trn1", "trn2"])
def test_matmul_tutorial_spellings_replay_exactly(target):
    x = RNG.standard_normal((256, 256)).astype(np.float32)
    y = RNG.standard_normal((256, 512)).astype(np.float32)
    for k in (MATMUL.matmul_tiled_nisa, MATMUL.matmul_tiled_nl):
        _, replayed = _roundtrip(k, (x, y), target=target)
        np.testing.assert_allclose(_outputs(replayed)[0], x.T @ y, rtol=2e-4, atol=2e-3)


@pytest.fixture(scope="module")
def legacy_api():
    sys.path.insert(0, str(ROOT / "tests"))
    try:
        return load_repo_module("tests/test_nkisim_legacy_api.py", "legacy_stream_api_kernels")
    finally:
        sys.path.remove(str(ROOT / "tests"))


def _bf16(a):
    return nl.static_cast(a, nl.bfloat16)


@pytest.mark.parametrize("target", ["trn1", "trn2"])
def test_sample_style_kernels_replay_exactly(legacy_api, target):
    """SPMD over heads with nl.ds, mgrid affine_select and activation_reduce; mgrid gathers and iota; host-computed
    indices; direct allocation with par_dim, shared_constant and wrapped PSUM blocks."""
    q, k = (_bf16(RNG.uniform(-1, 1, (2, 64, 256))) for _ in range(2))
    v = _bf16(RNG.uniform(-1, 1, (2, 256, 64)))
    _roundtrip(nki.baremetal(legacy_api._causal_attention)[2], (q, k, v), target=target)
    _roundtrip(legacy_api._window_argmax, (RNG.random((128, 8, 8), dtype=np.float32),), target=target)
    _roundtrip(legacy_api._resize_nearest, (RNG.random((2, 5, 4, 16), dtype=np.float32),),
               {"out_shape": (2, 9, 7, 16)}, target=target)
    x, w = _bf16(RNG.normal(size=(128, 256))), _bf16(RNG.normal(size=(256, 128)) * 0.1)
    _roundtrip(nki.jit(legacy_api._allocated_rmsnorm_matmul), (x, w), target=target)


# ---- what those do not use -------------------------------------------------------------------------------------
@nki.jit
def ragged_rows(x, scale):
    """Rows in tiles of 128 with a masked ragged tail (an out-of-bounds arange gather the mask disables), operators
    on tiles, a per-partition scalar, iota, nl.where, a reduction, astype and broadcast_to, ``~`` on an integer
    tile, and loop_reduce into an accumulator."""
    n, f = x.shape
    out = nl.ndarray((n, f), dtype=x.dtype, buffer=nl.shared_hbm)
    sums = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    s = nl.load(scale)
    acc = nl.zeros((128, f), dtype=nl.float32, buffer=nl.sbuf)
    ip, jf = nl.mgrid[0:128, 0:f]
    col = nisa.iota(jf, dtype=nl.float32)
    for i in nl.affine_range((n + 127) // 128):
        rows = i * 128 + ip
        t = nl.load(x[rows, jf], mask=(rows < n))
        u = (t * 2.0 + col) - s.broadcast_to((128, f))
        bits = ~nl.copy(u, dtype=nl.int32)
        u = nl.where(u > 0.0, u, nl.copy(bits, dtype=nl.float32) * 0.0)
        acc = nl.loop_reduce(u.astype(nl.float32), op=np.add, loop_indices=[i], mask=(rows < n))
        nl.store(out[rows, jf], value=u, mask=(rows < n))
    nl.store(sums, value=nl.sum(acc, axis=1, keepdims=True))
    return out, sums


def _ragged_reference(x, scale):
    n, f = x.shape
    u = x * 2.0 + np.arange(f, dtype=np.float32) - scale[0, 0]
    u = np.where(u > 0, u, 0.0).astype(np.float32)
    acc = np.zeros((128, f), np.float32)
    for i in range((n + 127) // 128):
        blk = u[i * 128:(i + 1) * 128]
        acc[:blk.shape[0]] += blk
    return u, acc.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("target", ["trn1", "trn2"])
def test_masks_gathers_operators_and_loop_reduce_replay_exactly(target):
    x = RNG.standard_normal((300, 64)).astype(np.float32)
    scale = np.full((1, 1), 0.5, np.float32)
    _, replayed = _roundtrip(ragged_rows, (x, scale), target=target)
    want_out, want_sums = _ragged_reference(x, scale)
    np.testing.assert_allclose(_outputs(replayed)[0], want_out, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(_outputs(replayed)[1], want_sums, rtol=1e-5, atol=1e-4)


@nki.jit
def acc_plus_matmul(a, b):
    """The 2024 course compiler's spelling of matmul accumulation (``acc[...] = acc + nl.matmul(..)``), on trn1."""
    k, m = a.shape
    out = nl.ndarray((m, b.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((m, b.shape[1]), dtype=nl.float32, buffer=nl.psum)
    for kk in nl.affine_range(k // 128):
        at = nl.load(a[kk * 128:(kk + 1) * 128, :])
        bt = nl.load(b[kk * 128:(kk + 1) * 128, :])
        acc[...] = acc + nl.matmul(at, bt, transpose_x=True)
    nl.store(out, value=nl.copy(acc))
    return out


def test_the_2024_accumulation_spelling_replays_exactly():
    a = RNG.standard_normal((256, 128)).astype(np.float32)
    b = RNG.standard_normal((256, 256)).astype(np.float32)
    _, replayed = _roundtrip(acc_plus_matmul, (a, b), target="trn1")
    np.testing.assert_allclose(_outputs(replayed)[0], a.T @ b, rtol=2e-4, atol=2e-3)


@nki.jit
def halves(x):
    """Program ``p`` of a grid over two NeuronCores adds ``p`` to its half of the rows (shared output)."""
    p = nl.program_id(0)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x[p * 128:(p + 1) * 128, :])
    nl.store(out[p * 128:(p + 1) * 128, :], value=nl.add(t, float(p)))
    return out


def test_an_spmd_grid_over_neuroncores_replays_exactly():
    x = RNG.standard_normal((256, 8)).astype(np.float32)
    _, replayed = _roundtrip(halves[nl.nc(2)], (x,))
    np.testing.assert_allclose(_outputs(replayed)[0], x + np.repeat([0.0, 1.0], 128)[:, None], rtol=1e-6)


def test_the_replay_uses_its_own_inputs():
    a, b = (RNG.standard_normal(128).astype(np.float32) for _ in range(2))
    data, _ = stream.record(PART1.vector_add_naive, (a, b))
    c, d = (RNG.standard_normal(128).astype(np.float32) for _ in range(2))
    run = stream.replay(stream.loads(stream.dumps(data)), (c, d))
    np.testing.assert_allclose(run.outputs, c + d, rtol=1e-6)


def _placed_copy(place):
    """Tiles placed by a placement function (``ncc.sbuf.alloc(f)``): the stream holds the places it returned."""
    @nki.jit
    def placed(a):
        out = nl.ndarray((4, 128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
        tiles = nl.ndarray((4, nl.par_dim(128), 64), dtype=a.dtype, buffer=ncc.sbuf.alloc(place))
        for i in nl.affine_range(4):
            tiles[i] = nl.load(a[i])
            nl.store(out[i], value=nl.multiply(tiles[i], 3.0))
        return out

    return placed


@pytest.mark.parametrize("place", [lambda idx, pdim_size, fdim_size: (0, 4096 + idx[0] * fdim_size),
                                   lambda idx, pdim_size, fdim_size: (0, (0, 1024, 256, 768)[idx[0]])],
                         ids=["affine", "scattered"])
def test_placement_functions_replay_exactly(place):
    a = RNG.standard_normal((4, 128, 64)).astype(np.float32)
    direct, replayed = _roundtrip(_placed_copy(place), (a,))
    np.testing.assert_allclose(_outputs(replayed)[0], 3 * a, rtol=1e-6)


def test_a_forged_placement_is_checked_as_the_kernels_would_be():
    a = RNG.standard_normal((4, 128, 64)).astype(np.float32)
    data, _ = stream.record(_placed_copy(lambda idx, p, f: (0, idx[0] * f)), (a,))
    table = next(v for e in _calls(data) for _, v in e[3] if isinstance(v, list) and v[:1] == ["Bc"])[2]
    table[1][1] = [0, 1 << 30]  # outside SBUF
    with pytest.raises(Exception, match="beyond the"):
        stream.replay(stream.loads(stream.dumps(data)), (a,))
    del table[1]  # a block without a place
    with pytest.raises(stream.StreamError, match="no place for block"):
        stream.replay(stream.loads(stream.dumps(data)), (a,))


# ---- not recordable: refused when recording, never replayed differently --------------------------------------
@nki.jit
def gathers(table, idx, offs):
    """Rows of ``table`` picked by an index tile (an indirect DMA, ``t[idx_tile, i_f]``), a tile plus an affine
    offset (``idx + i_p``: a DynIndex), and a copy at a run-time offset (``tensor_copy_dynamic_src``)."""
    out = nl.ndarray((4, 8), dtype=nl.float32, buffer=nl.shared_hbm)
    shifted = nl.ndarray((4, 8), dtype=nl.float32, buffer=nl.shared_hbm)
    picked = nl.ndarray((1, 4), dtype=nl.float32, buffer=nl.shared_hbm)
    ix = nl.load(idx)
    i_f = nl.arange(8)[None, :]
    rows = nl.load(table[ix, i_f])
    nl.store(out, value=rows)
    i_p = nl.arange(4)[:, None]
    nl.store(shifted, value=nl.load(table[ix[0:1, 0:1] + i_p, i_f]))
    src = nl.load(table[0:1, :])
    o = nl.load(offs)
    nl.store(picked, value=nisa.tensor_copy_dynamic_src(src[0, o[0, 0] + nl.arange(4)[None, :]]))
    return out, shifted, picked


def test_views_indexed_by_a_tiles_values_replay_exactly():
    """The stream holds how such a view was made (its base and its index, the tile among it); the replay indexes
    again, with the tile's values in its own run."""
    table = RNG.standard_normal((16, 8)).astype(np.float32)
    idx = np.array([[3], [0], [11], [7]], np.int32)
    offs = np.array([[2]], np.int32)
    _, replayed = _roundtrip(gathers, (table, idx, offs))
    got = _outputs(replayed)
    np.testing.assert_array_equal(got[0], table[idx[:, 0]])
    np.testing.assert_array_equal(got[1], table[3:7])
    np.testing.assert_array_equal(got[2], table[0:1, 2:6])
    # the stream has no index values: replayed on other indices, the program gathers those rows
    data, _ = stream.record(gathers, (table, idx, offs))
    other = np.array([[1], [2], [3], [4]], np.int32)
    run = stream.replay(stream.loads(stream.dumps(data)), (table, other, offs))
    np.testing.assert_array_equal(run.outputs[0], table[1:5])
    # forged: the tile taken out of the index (a plain gather the kernel did not make) is refused
    view = next(a for e in _calls(data) for a in e[2] if isinstance(a, list) and a[:1] == ["T"]
                and isinstance(a[2], list) and a[2][:1] == ["ix"])
    view[2][2][1][0] = 0
    with pytest.raises(stream.StreamError, match="without a tile"):
        stream.replay(stream.loads(stream.dumps(data)), (table, idx, offs))


def test_a_view_indexed_again_after_a_dynamic_index_is_not_recorded():
    @nki.jit
    def derived(table, idx):
        """A view indexed from a dynamically indexed one: its addresses are stand-ins in the child."""
        out = nl.ndarray((2, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        ix = nl.load(idx)
        i_f = nl.arange(8)[None, :]
        rows = table[ix, i_f]
        nl.store(out, value=nl.load(rows[0:2, :]))
        return out

    with pytest.raises(stream.NotRecordable, match="indexed again after a dynamic index"):
        stream.record(derived, (np.zeros((16, 8), np.float32), np.zeros((4, 1), np.int32)))


# ---- forged and malformed legacy streams ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def ragged():
    x = RNG.standard_normal((300, 64)).astype(np.float32)
    scale = np.full((1, 1), 0.5, np.float32)
    data, _ = stream.record(ragged_rows, (x, scale))
    return stream.loads(stream.dumps(data)), (x, scale)


def _calls(s):
    return [e for e in s["events"] if e[0] == "call"]


def _gather_arg(s):
    """The first call argument that is a gather view (["T", aid, ["g", ...], ...])."""
    for e in _calls(s):
        for a in [*e[2], *(kv[1] for kv in e[3])]:
            if isinstance(a, list) and a[:1] == ["T"] and isinstance(a[2], list) and a[2][:1] == ["g"]:
                return a
    raise AssertionError("no gather view in the stream")


def _forge(s, change):
    s = copy.deepcopy(s)
    change(s)
    return s


def _nki_call(s):
    s["functions"][0] = "nkisim.frontends.nki.isa:dma_copy"


@pytest.mark.parametrize("change,message", [
    (_nki_call, "not a function of the kernel's front end"),
    (lambda s: s["functions"].__setitem__(0, "nkisim.frontends.legacy.language:_filled"), "not a function"),
    (lambda s: s["events"].insert(0, ["set", 1, 3]), "do not exist in a legacy API program"),
    (lambda s: _calls(s)[0][2].append(["R", 1]), "register does not exist"),
    (lambda s: _gather_arg(s)[2].__setitem__(4, 1 << 30), "outside its"),
    (lambda s: _gather_arg(s)[2].__setitem__(6, [7, 7, 7]), "broadcast"),
    (lambda s: _gather_arg(s).append(["x"]), "malformed"),
    (lambda s: _calls(s)[0][2].append(["X", ["A", "int64", [2], [0, 1]], [1, 2]]), "index variables"),
    (lambda s: _calls(s)[0][2].append(["B", "sbuf", 0, 0, "x"]), "direct allocation"),
    (lambda s: s.__setitem__("frontend", "neuron"), "front end"),
])
def test_a_forged_or_malformed_legacy_stream_is_refused_naming_the_problem(ragged, change, message):
    s, args = ragged
    with pytest.raises(stream.StreamError, match=message):
        stream.replay(_forge(s, change), args)
