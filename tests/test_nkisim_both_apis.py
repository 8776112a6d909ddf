"""The emulator's semantics, specified once and checked through both front ends.

Each test is one kernel written against a tiny API shim, spelled in the legacy ``neuronxcc.nki`` API
(``dst[...] = nisa.x(...)``, ``acc += nisa.nc_matmul(...)``) and in the current ``nki`` API (``nisa.x(dst, ...)``):
both must give the same values, the same errors and the same instruction stream.  The rules themselves are the
core's (nkisim/core), so a front end that spells a call differently inherits them here.
"""

from __future__ import annotations

import ml_dtypes
import neuronxcc.nki.isa as lisa
import neuronxcc.nki.language as lnl
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest
from nkisim_util import raises_rule

from nkisim import frontends
from nkisim.core.runtime import run_kernel


class Legacy:
    """The legacy spelling of the operations the tests use."""

    fe = frontends.LEGACY
    nl = lnl
    out_buffer = lnl.hbm

    def ndarray(self, shape, dtype, buffer=None):
        return lnl.ndarray(shape, dtype=dtype, buffer=buffer or lnl.sbuf)

    def load(self, dst, src):
        lisa.dma_copy(src=src, dst=dst)

    def store(self, dst, src):
        lisa.dma_copy(src=src, dst=dst)

    def add(self, dst, a, b):
        dst[...] = lisa.tensor_tensor(a, b, op=lnl.add)

    def add_scalar(self, dst, a, c):
        dst[...] = lisa.tensor_scalar(a, lnl.add, c)

    def exp(self, dst, a):
        dst[...] = lisa.activation(op=lnl.exp, data=a)

    def copy(self, dst, src):
        dst[...] = lisa.tensor_copy(src)

    def matmul_acc(self, acc, st, mv):
        acc += lisa.nc_matmul(st, mv)

    def transpose(self, dst, data):
        dst[...] = lisa.nc_transpose(data)

    def reduce_max(self, dst, data, axis):
        dst[...] = lisa.tensor_reduce(lnl.max, data, axis=axis)

    def memset(self, dst, value):
        dst[...] = value


class Current(Legacy):
    """The current API's spelling."""

    fe = frontends.NKI
    nl = nl
    out_buffer = nl.shared_hbm

    def ndarray(self, shape, dtype, buffer=None):
        return nl.ndarray(shape, dtype=dtype, buffer=buffer or nl.sbuf)

    def load(self, dst, src):
        nisa.dma_copy(dst=dst, src=src)

    def store(self, dst, src):
        nisa.dma_copy(dst=dst, src=src)

    def add(self, dst, a, b):
        nisa.tensor_tensor(dst=dst, data1=a, data2=b, op=nl.add)

    def add_scalar(self, dst, a, c):
        nisa.tensor_scalar(dst=dst, data=a, op0=nl.add, operand0=c)

    def exp(self, dst, a):
        nisa.activation(dst=dst, op=nl.exp, data=a)

    def copy(self, dst, src):
        nisa.tensor_copy(dst=dst, src=src)

    def matmul_acc(self, acc, st, mv):
        nisa.nc_matmul(dst=acc, stationary=st, moving=mv)

    def transpose(self, dst, data):
        nisa.nc_transpose(dst=dst, data=data)

    def reduce_max(self, dst, data, axis):
        nisa.tensor_reduce(dst=dst, op=nl.max, data=data, axis=axis)

    def memset(self, dst, value):
        nisa.memset(dst=dst, value=value)


API = [Legacy(), Current()]
IDS = ["legacy", "nki"]


def run(api, kernel, *args, mode="full", **kwargs):
    """Run ``kernel`` (a function of ``api`` returning the kernel function: shared_hbm outputs must be created in
    the kernel's own frame) through ``api``'s front end."""
    return run_kernel(kernel(api), args, kwargs, mode=mode, frontend=api.fe)


def run_both(kernel, *args, **kwargs):
    """Values and instruction streams of the kernel through both front ends (they must agree)."""
    outs, ops = [], []
    for api in API:
        r = run(api, kernel, *args, **kwargs)
        outs.append(r.outputs)
        ops.append([(i.op, int(i.engine)) for i in r.trace.instrs])
    assert ops[0] == ops[1], ops
    return outs


A = np.arange(128 * 64, dtype=np.float32).reshape(128, 64) / 64


@pytest.mark.parametrize("api", API, ids=IDS)
def test_unwritten_memory_reads_as_nan(api):
    """nl.ndarray is uninitialised: AWS's simulator fills fresh tensors with NaN (floats) and 4 (integers) "so
    reading data that was never written shows up in the output" (nki/guides/nki_simulator.rst, "Uninitialized
    Memory Detection"); nkisim does the same in both APIs."""
    def k(api):
        def kernel(a):
            out = api.nl.ndarray((128, 64), dtype=np.float32, buffer=api.out_buffer)
            t = api.ndarray((128, 64), np.float32)
            api.load(t[:, 0:32], a[:, 0:32])  # half the tile only
            api.store(out, t)
            ints = api.ndarray((128, 8), np.int32)
            iout = api.nl.ndarray((128, 8), dtype=np.int32, buffer=api.out_buffer)
            api.store(iout, ints)
            return out, iout
        return kernel

    out, iout = run(api, k, A).outputs
    np.testing.assert_array_equal(out[:, :32], A[:, :32])
    assert np.isnan(out[:, 32:]).all()
    assert (iout == 4).all()


def test_values_and_instructions_agree_across_apis():
    def k(api):
        def kernel(a):
            out = api.nl.ndarray((128, 64), dtype=np.float32, buffer=api.out_buffer)
            t = api.ndarray((128, 64), np.float32)
            api.load(t, a)
            s = api.ndarray((128, 64), np.float32)
            api.add(s, t, t)
            e = api.ndarray((128, 64), np.float32)
            api.exp(e, s)
            api.add_scalar(e, e, 1.5)
            m = api.ndarray((128, 1), np.float32)
            api.reduce_max(m, e, 1)
            api.add_scalar(e, e, m)
            api.store(out, e)
            return out
        return kernel

    a, b = run_both(k, A / 10)
    np.testing.assert_array_equal(a, b)
    x = np.exp(2 * (A / 10)) + 1.5
    np.testing.assert_allclose(a, x + x.max(axis=1, keepdims=True), rtol=1e-6)


@pytest.mark.parametrize("api", API, ids=IDS)
def test_result_dtype_is_the_destinations(api):
    """Engines compute in fp32 and round once into the destination's dtype."""
    def k(api):
        def kernel(a):
            t = api.ndarray((128, 64), np.float32)
            api.load(t, a)
            d = api.ndarray((128, 64), ml_dtypes.bfloat16)
            api.add_scalar(d, t, 1.0 / 3)
            out = api.nl.ndarray((128, 64), dtype=np.float32, buffer=api.out_buffer)
            api.store(out, d)
            return out
        return kernel

    out = run(api, k, A).outputs
    np.testing.assert_array_equal(out, (A + np.float32(1 / 3)).astype(ml_dtypes.bfloat16).astype(np.float32))


@pytest.mark.parametrize("api", API, ids=IDS)
def test_psum_accumulation_groups(api):
    """The first matmul into a fresh PSUM region overwrites (its poison too), later ones accumulate in fp32."""
    st = np.random.default_rng(0).random((128, 64)).astype(np.float16)
    mv = np.random.default_rng(1).random((128, 256)).astype(np.float16)

    def k(api):
        def kernel(st, mv):
            s = api.ndarray((128, 64), np.float16)
            m = api.ndarray((128, 256), np.float16)
            api.load(s, st)
            api.load(m, mv)
            acc = api.ndarray((64, 256), np.float32, api.nl.psum)
            for _ in range(3):
                api.matmul_acc(acc, s, m)
            r = api.ndarray((64, 256), np.float32)
            api.copy(r, acc)
            out = api.nl.ndarray((64, 256), dtype=np.float32, buffer=api.out_buffer)
            api.store(out, r)
            return out
        return kernel

    out = run(api, k, st, mv).outputs
    one = st.astype(np.float32).T @ mv.astype(np.float32)
    np.testing.assert_allclose(out, 3 * one, rtol=1e-5)


@pytest.mark.parametrize("api", API, ids=IDS)
def test_views_write_through_to_their_parent(api):
    """A slice of a slice is a view of the same storage: writing it is visible through the parent."""
    def k(api):
        def kernel(a):
            t = api.ndarray((128, 64), np.float32)
            api.memset(t, 0.0)
            inner = t[:, 16:48][:, 8:16]  # columns 24..31
            api.load(inner, a[:, 0:8])
            out = api.nl.ndarray((128, 64), dtype=np.float32, buffer=api.out_buffer)
            api.store(out, t)
            return out
        return kernel

    out = run(api, k, A).outputs
    want = np.zeros_like(A)
    want[:, 24:32] = A[:, 0:8]
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("api", API, ids=IDS)
def test_transpose_through_tensor_engine(api):
    def k(api):
        def kernel(a):
            t = api.ndarray((128, 64), np.float32)
            api.load(t, a)
            p = api.ndarray((64, 128), np.float32, api.nl.psum)
            api.transpose(p, t)
            s = api.ndarray((64, 128), np.float32)
            api.copy(s, p)
            out = api.nl.ndarray((64, 128), dtype=np.float32, buffer=api.out_buffer)
            api.store(out, s)
            return out
        return kernel

    np.testing.assert_array_equal(run(api, k, A).outputs, A.T)


@pytest.mark.parametrize("api", API, ids=IDS)
def test_partition_limit_is_the_same_error(api):
    def k(api):
        def kernel(a):
            api.ndarray((256, 4), np.float32)
        return kernel

    with raises_rule("err_num_partition_exceed_arch_limit", "256", "128"):
        run(api, k, A)


@pytest.mark.parametrize("api", API, ids=IDS)
def test_psum_operand_of_a_vector_op_pair_is_the_same_error(api):
    def k(api):
        def kernel(a):
            p = api.ndarray((128, 64), np.float32, api.nl.psum)
            q = api.ndarray((128, 64), np.float32, api.nl.psum)
            api.memset(p, 0.0)
            api.memset(q, 0.0)
            api.add(api.ndarray((128, 64), np.float32), p, q)
        return kernel

    with raises_rule("nkisim_two_inputs_in_psum", "tensor_tensor"):
        run(api, k, A)


@pytest.mark.parametrize("api", API, ids=IDS)
def test_sbuf_capacity_is_checked_by_liveness(api):
    """Tiles that stay live past SBUF's usable bytes spill in both APIs (issue 33, core.spill); a tile that could not
    fit on its own stays the capacity error."""
    def k(api):
        def kernel(a):
            keep = [api.ndarray((128, 16 * 1024), np.float32) for _ in range(4)]  # 4 x 64 KiB per partition
            for t in keep:
                api.memset(t, 1.0)
            out = api.ndarray((128, 16 * 1024), np.float32)
            api.add(out, keep[0], keep[1])
            api.add(out, out, keep[2])
            api.add(out, out, keep[3])
            res = api.nl.ndarray((128, 16 * 1024), dtype=np.float32, buffer=api.out_buffer)
            api.store(res, out)
            return res
        return kernel

    r = run(api, k, A)
    np.testing.assert_array_equal(r.outputs, np.full((128, 16 * 1024), 4.0, np.float32))
    assert r.trace.meta["spill"]["saves"] >= 1 and r.trace.meta["spill"]["reloads"] >= 1

    def too_big(api):
        def kernel(a):
            return api.ndarray((128, 60 * 1024), np.float32)  # 240 KiB per partition
        return kernel

    with raises_rule("nkisim_sbuf_capacity", "SBUF over-subscribed"):
        run(api, too_big, A)


@pytest.mark.parametrize("api", API, ids=IDS)
def test_hbm_stays_opaque(api):
    def k(api):
        def kernel(a):
            np.asarray(a)
        return kernel

    with raises_rule("nkisim_hbm_opaque", "HBM tensor 'a'"):
        run(api, k, A)


@pytest.mark.parametrize("api", API, ids=IDS)
def test_timing_mode_gives_the_same_trace(api):
    def k(api):
        def kernel(a):
            out = api.nl.ndarray((128, 64), dtype=np.float32, buffer=api.out_buffer)
            t = api.ndarray((128, 64), np.float32)
            api.load(t, a)
            api.add_scalar(t, t, 2.0)
            api.store(out, t)
            return out
        return kernel

    full = run(api, k, A).trace
    timing = run(api, k, A, mode="timing").trace
    assert [(i.op, i.engine, i.dsts[0].region) for i in full] == [(i.op, i.engine, i.dsts[0].region) for i in timing]


# ---- the launch grid and device printing: nkisim.core.launchinfo, one definition for both front ends -------------


def _jit(api):
    import neuronxcc.nki as lnki
    import nki

    return lnki.jit if api.fe is frontends.LEGACY else nki.jit


def _halves(api, seen: list, printed=None):
    """Each program of a 2-program launch adds its program id to its half of the rows, and says what it saw."""
    lang = api.nl

    def kernel(x):
        pid, n = lang.program_id(0), lang.num_programs(0)
        seen.append((pid, n, lang.program_ndim()))
        rows = x.shape[0] // n
        out = lang.ndarray(x.shape, dtype=x.dtype, buffer=lang.shared_hbm)
        t = api.ndarray((rows, x.shape[1]), x.dtype)
        api.load(t, x[pid * rows:(pid + 1) * rows, :])
        api.add_scalar(t, t, float(pid))
        api.store(out[pid * rows:(pid + 1) * rows, :], t)
        if printed is not None:
            lang.device_print(f"program {pid}", printed(t))
        return out

    return kernel


def test_grid_queries_agree_across_apis():
    x = np.arange(256 * 4, dtype=np.float32).reshape(256, 4)
    want = x + np.repeat([0.0, 1.0], 128)[:, None].astype(np.float32)
    for api in API:
        seen: list = []
        np.testing.assert_array_equal(_jit(api)(_halves(api, seen))[2](x), want)
        assert seen == [(0, 2, 1), (1, 2, 1)], api
        seen.clear()
        np.testing.assert_array_equal(_jit(api)(_halves(api, seen))(x[:128]), x[:128])
        assert seen == [(0, 1, 0)], api  # no grid: one program along axis 0


@pytest.mark.parametrize("api", API, ids=IDS)
@pytest.mark.parametrize("query,match", [
    (lambda lang: lang.program_id(1), "program_id\\(1\\): axis out of range for a launch grid with 1 dimension"),
    (lambda lang: lang.num_programs(2), "num_programs\\(2\\): axis out of range"),
    (lambda lang: lang.program_id("0"), None),
])
def test_an_axis_the_grid_lacks_is_an_error_in_both_apis(api, query, match):
    """The legacy front end raised, the current one answered 0 or 1: both raise now (nkisim.core.launchinfo)."""
    lang = api.nl

    def kernel(x):
        query(lang)
        out = lang.ndarray(x.shape, dtype=x.dtype, buffer=lang.shared_hbm)
        return out

    x = np.zeros((128, 4), np.float32)
    error = IndexError if match else TypeError
    with pytest.raises(error, match=match or "an axis of the launch grid is an integer"):
        _jit(api)(kernel)[2](x)
    with pytest.raises(error, match="launched without an SPMD grid" if match else None):
        _jit(api)(kernel)(x)


def test_device_print_agrees_across_apis(capsys):
    x = np.arange(256 * 4, dtype=np.float32).reshape(256, 4)
    lines = []
    for api in API:
        seen: list = []
        _jit(api)(_halves(api, seen, printed=lambda t: t))[2](x)
        out = capsys.readouterr().out
        assert out.startswith("program 0 [[  0.   1.   2.   3.]"), out[:80]
        assert "program 1 [[ 513.  514.  515.  516.]" in out, out
        lines.append(out)
        run(api, lambda api: _halves(api, [], printed=lambda t: 7), x[:128], mode="timing")
        assert capsys.readouterr().out == ""  # a timing run prints nothing
        run(api, lambda api: _halves(api, [], printed=lambda t: 7), x[:128])
        assert capsys.readouterr().out == "program 0 7\n"  # a value of the kernel's Python prints as it is
    assert lines[0] == lines[1]


def test_the_current_apis_like_constructors_default_buffers():
    """nki.language.zeros_like: "buffer ... defaults to sbuf"; empty_like: "(default: same as x)"
    (nki/api/nki/language/__init__.py, NKI 0.6)."""
    found = {}

    def kernel(a):
        zeros = nl.zeros_like(a)
        found["arg"] = a.buffer
        found["zeros"] = zeros.buffer
        found["empty"] = nl.empty_like(a).buffer
        found["empty_sbuf"] = nl.empty_like(zeros).buffer
        found["zeros_psum"] = nl.zeros_like(a, dtype=nl.float32, buffer=nl.psum).buffer
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=zeros)
        return out

    run_kernel(kernel, (np.zeros((128, 64), np.float32),), frontend=frontends.NKI)
    arg = found.pop("arg")
    assert arg in (nl.shared_hbm, nl.private_hbm) and found.pop("empty") == arg  # empty_like: x's own buffer
    assert found == {"zeros": nl.sbuf, "empty_sbuf": nl.sbuf, "zeros_psum": nl.psum}
