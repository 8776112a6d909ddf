"""The current NKI front end (``import nki``: NKI 0.6 / Neuron SDK 2.32): launchers, nki.language, nki.isa's
destination-first calls, NkiTensor views, the rules of the 'nki' era and the errors for what the API removed.

Kernels here are our own, written in the style of AWS's documented examples (aws-neuron-sdk nki/examples and the API
reference) and checked against NumPy."""

from __future__ import annotations

import warnings

import ml_dtypes
import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest
from nkisim_util import raises_rule

from nkisim import apicoverage
from nkisim.core.rules import NKISimulationWarning
from nkisim.core.runtime import run_kernel
from nkisim.frontends import NKI
from nkisim.frontends._unsupported import NkisimUnsupportedError

RNG = np.random.default_rng(7)


def _f32(*shape):
    return RNG.random(shape).astype(np.float32)


# ---------------------------------------------------------------------------------------------------------------
# conformance: kernels in the style of AWS's nki/examples


@nki.jit
def tiled_add(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    rows, cols = a.shape
    for r in nl.affine_range(rows // 128):
        for c in nl.affine_range(cols // 256):
            ta = nl.ndarray((128, 256), dtype=a.dtype, buffer=nl.sbuf)
            tb = nl.ndarray((128, 256), dtype=b.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=ta, src=a[r * 128:(r + 1) * 128, c * 256:(c + 1) * 256])
            nisa.dma_copy(dst=tb, src=b[r * 128:(r + 1) * 128, c * 256:(c + 1) * 256])
            tc = nl.ndarray((128, 256), dtype=a.dtype, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=tc, data1=ta, data2=tb, op=nl.add)
            nisa.dma_copy(dst=out[r * 128:(r + 1) * 128, c * 256:(c + 1) * 256], src=tc)
    return out


def test_tiled_add_matches_numpy():
    a, b = _f32(256, 512), _f32(256, 512)
    np.testing.assert_array_equal(tiled_add(a, b), a + b)


@nki.jit
def element_transpose(x, rows, cols):
    """Each partition holds a rows x cols matrix flattened; transpose it with one-element copies (nl.ds)."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    src = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=src, src=x)
    dst = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    for i in nl.static_range(rows):
        for j in nl.static_range(cols):
            nisa.tensor_copy(dst=dst[:, nl.ds(j * rows + i, 1)], src=src[:, nl.ds(i * cols + j, 1)])
    nisa.dma_copy(dst=out, src=dst)
    return out


def test_element_transpose_matches_numpy():
    x = np.arange(6 * 12, dtype=np.int8).reshape(6, 12)
    np.testing.assert_array_equal(element_transpose(x, 3, 4), x.reshape(6, 3, 4).transpose(0, 2, 1).reshape(6, 12))


@nki.jit
def blocked_matmul(lhs_t, rhs):
    """lhs_t [K, M] (already transposed), rhs [K, N]; K tiles accumulate in one PSUM tile per output tile."""
    k_dim, m_dim = lhs_t.shape
    _, n_dim = rhs.shape
    out = nl.ndarray((m_dim, n_dim), dtype=nl.float32, buffer=nl.shared_hbm)
    tk, tm, tn = nl.tile_size.pmax, nl.tile_size.gemm_stationary_fmax, nl.tile_size.gemm_moving_fmax
    for m in nl.affine_range(m_dim // tm):
        for n in nl.affine_range(n_dim // tn):
            acc = nl.ndarray((tm, tn), dtype=nl.float32, buffer=nl.psum)
            for k in nl.sequential_range(k_dim // tk):
                lt = nl.ndarray((tk, tm), dtype=lhs_t.dtype, buffer=nl.sbuf)
                rt = nl.ndarray((tk, tn), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=lt, src=lhs_t[k * tk:(k + 1) * tk, m * tm:(m + 1) * tm])
                nisa.dma_copy(dst=rt, src=rhs[k * tk:(k + 1) * tk, n * tn:(n + 1) * tn])
                nisa.nc_matmul(dst=acc, stationary=lt, moving=rt)
            res = nl.ndarray((tm, tn), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res, src=acc)
            nisa.dma_copy(dst=out[m * tm:(m + 1) * tm, n * tn:(n + 1) * tn], src=res)
    return out


def test_blocked_matmul_accumulates_in_psum():
    lhs_t = RNG.random((384, 256)).astype(np.float16)
    rhs = RNG.random((384, 1024)).astype(np.float16)
    np.testing.assert_allclose(blocked_matmul(lhs_t, rhs), lhs_t.astype(np.float32).T @ rhs.astype(np.float32),
                               rtol=1e-4)


@nki.jit
def pooled_mean(x, k):
    """Average pooling with an access pattern: a 5-D view [C, H/k, W/k, k, k] of the [C, H, W] tile, summed over
    its two trailing axes."""
    c, h, w = x.shape
    out = nl.ndarray((c, h // k, w // k), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    windows = t.ap([[h * w, c], [k * w, h // k], [k, w // k], [w, k], [1, k]])
    s = nl.sum(windows, axis=[3, 4])
    res = nl.ndarray(s.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=res, data=s, op0=nl.multiply, operand0=1.0 / (k * k))
    nisa.dma_copy(dst=out, src=res)
    return out


def test_pooling_through_an_access_pattern():
    x = np.arange(3 * 8 * 6, dtype=np.float32).reshape(3, 8, 6)
    np.testing.assert_allclose(pooled_mean(x, 2), x.reshape(3, 4, 2, 3, 2).mean(axis=(2, 4)), rtol=1e-6)


@nki.jit
def scan_kernel(decay, inp, coef):
    """A selective-scan step as in AWS's fused mamba tutorial: exp(decay), broadcast a one-partition row, a running
    scan (tensor_tensor_scan), in-place accumulation."""
    p, n = decay.shape
    out = nl.ndarray((p, n), dtype=decay.dtype, buffer=nl.shared_hbm)
    d = nl.ndarray((p, n), dtype=decay.dtype, buffer=nl.sbuf)
    u = nl.ndarray((p, n), dtype=inp.dtype, buffer=nl.sbuf)
    c = nl.ndarray((1, n), dtype=coef.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=d, src=decay)
    nisa.dma_copy(dst=u, src=inp)
    nisa.dma_copy(dst=c, src=coef)
    a = nl.ndarray((p, n), dtype=decay.dtype, buffer=nl.sbuf)
    nisa.activation(dst=a, op=nl.exp, data=d, scale=-1.0)
    cb = nl.broadcast_to(c, (p, n))
    bu = nl.ndarray((p, n), dtype=inp.dtype, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=bu, data1=u, data2=cb, op=nl.multiply)
    acc = nl.zeros((p, n), dtype=decay.dtype)
    scan = nl.ndarray((p, n), dtype=decay.dtype, buffer=nl.sbuf)
    nisa.tensor_tensor_scan(dst=scan, data0=a, data1=bu, initial=0.0, op0=nl.multiply, op1=nl.add)
    nisa.tensor_tensor(dst=acc, data1=acc, data2=scan, op=nl.add)
    nisa.dma_copy(dst=out, src=acc)
    return out


def test_scan_kernel_matches_numpy():
    decay, inp, coef = _f32(128, 64) / 4, _f32(128, 64), _f32(1, 64)
    a, bu = np.exp(-decay), inp * coef
    want = np.zeros_like(a)
    state = np.zeros((128,), np.float32)
    for t in range(64):
        state = a[:, t] * state + bu[:, t]
        want[:, t] = state
    np.testing.assert_allclose(scan_kernel(decay, inp, coef), want, rtol=1e-5)


# ---------------------------------------------------------------------------------------------------------------
# launchers


def test_simulate_returns_numpy_and_updates_inputs_in_place():
    """nki.simulate "Input arrays are updated in-place if the kernel modified the corresponding HBM tensors"
    (nki/guides/nki_simulator.rst, "Execution")."""
    @nki.jit
    def scale_into(x, out):
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0)
        nisa.dma_copy(dst=out, src=t)
        return out

    x, out = _f32(128, 8), np.zeros((128, 8), np.float32)
    got = nki.simulate(scale_into)(x, out)
    np.testing.assert_array_equal(got, 2 * x)
    np.testing.assert_array_equal(out, 2 * x)


def test_lnc2_launch_runs_two_programs():
    @nki.jit
    def halves(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        pid = nl.program_id(0)
        rows = x.shape[0] // nl.num_programs(0)
        t = nl.ndarray((rows, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[pid * rows:(pid + 1) * rows, :])
        nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=float(pid))
        nisa.dma_copy(dst=out[pid * rows:(pid + 1) * rows, :], src=t)
        return out

    x = _f32(256, 16)
    want = x + np.repeat([0.0, 1.0], 128)[:, None].astype(np.float32)
    np.testing.assert_array_equal(halves[2](x), want)
    np.testing.assert_array_equal(nki.simulate(halves[2])(x), want)
    np.testing.assert_array_equal(halves[1](x[:128]), x[:128])
    with pytest.raises(ValueError, match="Logical NeuronCore degree, 1 or 2"):
        halves[3]
    with pytest.raises(ValueError, match="legacy"):
        halves[2, 2]


def test_jit_rejects_the_options_nki_removed():
    with pytest.raises(TypeError, match="platform_target.*NEURON_PLATFORM_TARGET_OVERRIDE"):
        nki.jit(platform_target="trn2")


def test_jit_mode_is_deprecated_and_ignored():
    """NKI 0.3 migration guide, ``nki.jit(mode=...)``: "The mode parameter is deprecated and ignored" (AWS's
    nki-library still passes mode="trace" / "auto"); the kernel runs as without it."""
    for mode in ("trace", "auto", "simulation"):
        with pytest.warns(DeprecationWarning, match=f"mode='{mode}'.*deprecated and ignored"):
            kernel = nki.jit(mode=mode)(tiled_add.func)
        a, b = _f32(128, 256), _f32(128, 256)
        np.testing.assert_array_equal(kernel(a, b), a + b)
        assert "mode" not in kernel.options
    with pytest.raises(TypeError, match="experimental_flags.*comma-separated"):
        nki.jit(experimental_flags=["skip-non-top-level-shared-hbm-check"])


def test_nested_jit_kernel_inlines_into_the_callers_trace():
    """A @nki.jit sub-kernel called from a running kernel inlines (NKI 0.4 release notes' "nested NKI calls";
    AWS's nki-library MoE CTE does it): its instructions join the caller's one run, exactly as the undecorated
    function's do, and its HBM output is the caller's to return."""

    def scale_rows(x, s):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=s)
        nisa.dma_copy(dst=out, src=t)
        return out

    inner = nki.jit(scale_rows)

    def outer_with(sub):
        def outer(x):
            y = sub(x, 2.0)
            return sub(y, 3.0)  # a nested kernel's HBM output feeds the next call
        return outer

    x = _f32(128, 64)
    nested = run_kernel(nki.jit(outer_with(inner)), (x,), mode="full")
    plain = run_kernel(nki.jit(outer_with(scale_rows)), (x,), mode="full")
    np.testing.assert_allclose(nested.outputs, x * np.float32(2.0) * np.float32(3.0), rtol=1e-6)
    np.testing.assert_array_equal(nested.outputs, plain.outputs)
    assert [i.op for i in nested.trace] == [i.op for i in plain.trace] and len(nested.trace) == 6
    # a launch or a simulation inside a kernel is still refused: only a plain nested call inlines
    for launch in (lambda x: inner[1](x, 2.0), lambda x: nki.simulate(inner)(x, 2.0)):
        with pytest.raises(TypeError, match="cannot be called from inside a running kernel"):
            nki.jit(launch)(x)


def test_nki_simulator_env_makes_capacity_a_warning(monkeypatch):
    @nki.jit
    def hog(x):
        keep = [nl.ndarray((128, 20 * 1024), dtype=nl.float32, buffer=nl.sbuf) for _ in range(3)]
        for t in keep:
            nisa.memset(dst=t, value=0.0)
        nisa.tensor_tensor(dst=keep[0], data1=keep[1], data2=keep[2], op=nl.add)  # 240 KiB in one instruction

    with raises_rule("nkisim_sbuf_instruction", "couldn't be allocated in SB", "Total SB Partition Size: 229376"):
        hog(_f32(4, 4))
    monkeypatch.setenv("NKI_SIMULATOR", "1")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hog(_f32(4, 4))
    assert any("does not check capacity" in str(w.message) for w in caught)


def test_trn3_is_named_as_unmodelled(monkeypatch):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn3")
    with pytest.raises(ValueError, match=r"trn3 \(NeuronCore-v4\), which nkisim does not model.*=trn2"):
        tiled_add(_f32(128, 256), _f32(128, 256))


@pytest.mark.parametrize("target,usable", [("trn2", 212984), ("trn1", 180224)])
def test_tile_size_follows_the_target(target, usable):
    seen = {}

    def k(x):
        ts = nl.tile_size
        seen.update(pmax=ts.pmax, bank=ts.psum_bank_fmax, bank_bytes=ts.psum_bank_fmax_bytes, banks=ts.psum_num_banks,
                    fmax_bytes=ts.sbuf_fmax_bytes, total=ts.total_available_sbuf_size, moving=ts.gemm_moving_fmax)

    run_kernel(k, (_f32(4, 4),), target=target, frontend=NKI)
    assert seen == dict(pmax=128, bank=512, bank_bytes=2048, banks=8, fmax_bytes=usable, total=usable, moving=512)


# ---------------------------------------------------------------------------------------------------------------
# nki.isa: destination first


def test_nc_matmul_accumulate_modes():
    """accumulate=None: the first write to a PSUM location overwrites, later ones add; False overwrites; True adds
    (nki.isa.nc_matmul, "Accumulation mode")."""
    st, mv = _f32(128, 32), _f32(128, 64)
    one = st.T @ mv

    def k(st, mv, mode):
        s = nl.ndarray((128, 32), dtype=nl.float32, buffer=nl.sbuf)
        m = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=s, src=st)
        nisa.dma_copy(dst=m, src=mv)
        acc = nl.ndarray((32, 64), dtype=nl.float32, buffer=nl.psum)
        for i in range(3):
            accumulate = {"auto": None, "explicit": i > 0, "overwrite": False}[mode]
            nisa.nc_matmul(dst=acc, stationary=s, moving=m, accumulate=accumulate)
        res = nl.ndarray((32, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=acc)
        out = nl.ndarray((32, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=res)
        return out

    for mode, factor in (("auto", 3), ("explicit", 3), ("overwrite", 1)):
        got = run_kernel(k, (st, mv), {"mode": mode}, frontend=NKI).outputs
        np.testing.assert_allclose(got, factor * one, rtol=1e-5, err_msg=mode)


def test_nc_matmul_accumulate_true_needs_initialised_psum():
    """"Using accumulate=True on an uninitialized PSUM location is undefined behavior on all targets": an error,
    not NaN + product (or a silently right answer on zeros nkisim happened to keep)."""

    def k(st, mv, first):
        s = nl.ndarray((128, 32), dtype=nl.float32, buffer=nl.sbuf)
        m = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=s, src=st)
        nisa.dma_copy(dst=m, src=mv)
        acc = nl.ndarray((32, 128), dtype=nl.float32, buffer=nl.psum)
        if first:
            nisa.nc_matmul(dst=acc[:, 0:64], stationary=s, moving=m, accumulate=False)
        nisa.nc_matmul(dst=acc[:, 0:64], stationary=s, moving=m, accumulate=True)
        nisa.nc_matmul(dst=acc[:, 32:96], stationary=s, moving=m, accumulate=True)  # half of it never written

    st, mv = _f32(128, 32), _f32(128, 64)
    with raises_rule("nkisim_matmul_accumulate_uninit", "[32, 64]", "accumulate=False"):
        run_kernel(k, (st, mv), {"first": False}, frontend=NKI)
    with raises_rule("nkisim_matmul_accumulate_uninit", "[32, 64]"):
        run_kernel(k, (st, mv), {"first": True}, frontend=NKI)


def test_nc_matmul_accumulate_true_onto_value_initialised_psum():
    """NeuronCore-v2/v3 cannot accumulate a matmul onto PSUM that a memset or copy initialised (nc_matmul's
    note): an error there, while nl.zeros + the default accumulate (the architecture guide's pattern), an
    overwrite that starts the group stay allowed (nkisim models v2 and v3 only)."""

    def k(st, mv, init, mode):
        s = nl.ndarray((128, 32), dtype=nl.float32, buffer=nl.sbuf)
        m = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=s, src=st)
        nisa.dma_copy(dst=m, src=mv)
        acc = nl.ndarray((32, 64), dtype=nl.float32, buffer=nl.psum)
        if init == "memset":
            nisa.memset(dst=acc, value=0.0)
        elif init == "copy":
            z = nl.ndarray((32, 64), dtype=nl.float32, buffer=nl.sbuf)
            nisa.memset(dst=z, value=1.0)
            nisa.tensor_copy(dst=acc, src=z)
        if mode == "overwrite_first":
            nisa.nc_matmul(dst=acc, stationary=s, moving=m, accumulate=False)
        nisa.nc_matmul(dst=acc, stationary=s, moving=m, accumulate=True if mode != "auto" else None)
        res = nl.ndarray((32, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=acc)
        out = nl.ndarray((32, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=res)
        return out

    st, mv = _f32(128, 32), _f32(128, 64)
    one = st.T.astype(np.float64) @ mv
    for init in ("memset", "copy"):
        for target in ("trn2", "trn1"):
            with raises_rule("nkisim_matmul_accumulate_value_init", "non-matmul", target):
                run_kernel(k, (st, mv), {"init": init, "mode": "true"}, frontend=NKI, target=target)
    got = run_kernel(k, (st, mv), {"init": "memset", "mode": "auto"}, frontend=NKI).outputs
    np.testing.assert_allclose(got, one, rtol=1e-5)
    got = run_kernel(k, (st, mv), {"init": "copy", "mode": "overwrite_first"}, frontend=NKI).outputs
    np.testing.assert_allclose(got, 2 * one, rtol=1e-5)


def test_nc_matmul_writes_psum_fp32_only():
    def k(x, where):
        t = nl.ndarray((128, 32), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=t, value=1.0)
        dst = nl.ndarray((32, 32), dtype=nl.float32 if where == "sbuf" else nl.bfloat16,
                         buffer=nl.sbuf if where == "sbuf" else nl.psum)
        nisa.nc_matmul(dst=dst, stationary=t, moving=t)

    with raises_rule("err_unsupported_memory", "'dst' of 'nc_matmul'", "'psum'", "'sbuf'"):
        run_kernel(k, (_f32(4, 4),), {"where": "sbuf"}, frontend=NKI)
    with raises_rule("nkisim_matmul_dtype", "float32 PSUM tile"):
        run_kernel(k, (_f32(4, 4),), {"where": "bf16"}, frontend=NKI)


def test_iota_and_affine_select_follow_their_patterns():
    def k(x):
        io = nl.ndarray((4, 2, 3), dtype=nl.int32, buffer=nl.sbuf)
        nisa.iota(dst=io, pattern=[[10, 2], [1, 3]], offset=5, channel_multiplier=100)
        src = nl.ndarray((4, 6), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=src, value=7.0)
        sel = nl.ndarray((4, 6), dtype=nl.float32, buffer=nl.sbuf)
        # keep where partition - column >= 0 (a causal mask)
        nisa.affine_select(dst=sel, pattern=[[-1, 6]], channel_multiplier=1, on_true_tile=src, on_false_value=-1.0,
                           cmp_op=nl.greater_equal)
        o1 = nl.ndarray((4, 2, 3), dtype=nl.int32, buffer=nl.shared_hbm)
        o2 = nl.ndarray((4, 6), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o1, src=io)
        nisa.dma_copy(dst=o2, src=sel)
        return o1, o2

    io, sel = run_kernel(k, (_f32(4, 4),), frontend=NKI).outputs
    p, a, b = np.meshgrid(np.arange(4), np.arange(2), np.arange(3), indexing="ij")
    np.testing.assert_array_equal(io, 5 + 100 * p + 10 * a + b)
    pp, cc = np.meshgrid(np.arange(4), np.arange(6), indexing="ij")
    np.testing.assert_array_equal(sel, np.where(pp - cc >= 0, 7.0, -1.0))


def test_removed_parameters_and_raw_enums_name_the_replacement():
    def k(x, what):
        t = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.sbuf)
        if what == "mask":
            nisa.memset(dst=t, value=0.0, mask=None)
        elif what == "dtype":
            nisa.tensor_copy(dst=t, src=t, dtype=nl.float32)
        else:
            nisa.tensor_copy(dst=t, src=t, engine=5)

    with pytest.raises(TypeError, match="mask parameter was removed in NKI 0.2: slice the operands"):
        run_kernel(k, (_f32(4, 4),), {"what": "mask"}, frontend=NKI)
    with pytest.raises(TypeError, match="result dtype is the destination's"):
        run_kernel(k, (_f32(4, 4),), {"what": "dtype"}, frontend=NKI)
    with pytest.raises(TypeError, match="member of nki.isa.engine.*no longer accepts raw integers"):
        run_kernel(k, (_f32(4, 4),), {"what": "enum"}, frontend=NKI)


def test_memset_value_must_suit_the_dtype():
    def k(x):
        t = nl.ndarray((128, 4), dtype=nl.int32, buffer=nl.sbuf)
        nisa.memset(dst=t, value=2.0)

    with raises_rule("nkisim_memset_value", "2.0", "int32"):
        run_kernel(k, (_f32(4, 4),), frontend=NKI)


def test_destination_shape_must_match_the_result():
    def k(x):
        a = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=a, value=1.0)
        d = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=d, data=a, op0=nl.add, operand0=1.0)

    with raises_rule("nkisim_dst_mismatch", "tensor_scalar", "[128, 4]", "[128, 8]"):
        run_kernel(k, (_f32(4, 4),), frontend=NKI)


def test_reduction_axes_must_be_trailing():
    def k(x):
        t = nl.ndarray((128, 4, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=t, value=1.0)
        r = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=r, op=nl.add, data=t, axis=1)

    with raises_rule("nkisim_reduce_axes", "(1,)", "last contiguous free dimension"):
        run_kernel(k, (_f32(4, 4),), frontend=NKI)


def test_scalar_engine_copy_is_not_on_trn1():
    def k(x):
        t = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=t, value=1.0)
        nisa.tensor_copy(dst=t, src=t, engine=nisa.engine.scalar)

    with raises_rule("nkisim_scalar_engine_copy", "trn1", "nisa.activation"):
        run_kernel(k, (_f32(4, 4),), target="trn1", frontend=NKI)
    run_kernel(k, (_f32(4, 4),), target="trn2", frontend=NKI)


def test_outputs_live_in_shared_hbm():
    def k(x):
        out = nl.ndarray((4, 4), dtype=nl.float32, buffer=nl.hbm)
        nisa.dma_copy(dst=out, src=x)
        return out

    with raises_rule("nkisim_output_buffer", "private_hbm", "nl.shared_hbm"):
        run_kernel(k, (_f32(4, 4),), frontend=NKI)
    with pytest.warns(NKISimulationWarning, match="shared_hbm"):
        run_kernel(k, (_f32(4, 4),), frontend=NKI, simulate=True)


def test_one_namespace_per_kernel():
    import neuronxcc.nki.isa as legacy_isa

    def k(x):
        t = nl.ndarray((4, 4), dtype=nl.float32, buffer=nl.sbuf)
        legacy_isa.dma_copy(src=x, dst=t)

    with raises_rule("nkisim_mixed_namespaces", "neuronxcc.nki.isa.dma_copy", "written for nki"):
        run_kernel(k, (_f32(4, 4),), frontend=NKI)


# ---------------------------------------------------------------------------------------------------------------
# NkiTensor


def test_tensor_attributes_and_indexing_rules():
    seen = {}

    def k(x):
        t = nl.ndarray((128, 64, 32), dtype=nl.float32, buffer=nl.sbuf)
        h = nl.ndarray((4, 128, 32), dtype=nl.float32, buffer=nl.shared_hbm)
        seen.update(strides=t.strides, offset=t[:, 2:, 4:].offset, size=t.size, buffer=t.buffer is nl.sbuf,
                    hbuf=h.buffer is nl.shared_hbm, p_int=t[0, :, :].shape, f_int=t[:, :, 0].shape,
                    h_int=h[0, :, :].shape, neg=t[-2:, -1, :].shape, pattern=t[:, 0:4, 0:8].get_pattern(),
                    contiguous=t.is_contiguous(), sliced=t[:, :, 0:8].is_contiguous())

    run_kernel(k, (_f32(4, 4),), frontend=NKI)
    assert seen == dict(strides=(2048, 32, 1), offset=68, size=128 * 64 * 32, buffer=True, hbuf=True,
                        p_int=(1, 64, 32), f_int=(128, 64), h_int=(128, 32), neg=(2, 32),
                        pattern=[[2048, 128], [32, 4], [1, 8]], contiguous=True, sliced=False)


def test_views_share_storage():
    def k(x):
        t = nl.ndarray((128, 4, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        # permute + select write through: t[:, 1, :] = 0 spelled as a view of the permuted tensor
        nisa.memset(dst=t.permute((0, 2, 1)).select(2, 1), value=0.0)
        flat = t.flatten_dims(1, 2)  # [128, 32], same storage
        nisa.tensor_scalar(dst=flat[:, 0:4], data=flat[:, 0:4], op0=nl.add, operand0=100.0)
        out = nl.ndarray((128, 4, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t.reshape_dim(1, (4,)))
        return out

    x = _f32(128, 4, 8)
    want = x.copy()
    want[:, 1, :] = 0
    want[:, 0, 0:4] += 100
    np.testing.assert_array_equal(run_kernel(k, (x,), frontend=NKI).outputs, want)


def test_broadcast_and_view_dtype():
    def k(x):
        row = nl.ndarray((128, 1, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=row, src=x)
        wide = nl.ndarray((128, 3, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=wide, src=row.broadcast(1, 3))
        assert wide.view(nl.uint8).shape == (128, 3, 32)  # the last dimension scales with the dtype size
        bits = nl.ndarray((128, 3, 8), dtype=nl.int32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=bits, src=wide.view(nl.int32))
        return bits

    x = _f32(128, 1, 8)
    got = run_kernel(k, (x,), frontend=NKI).outputs
    np.testing.assert_array_equal(got, np.broadcast_to(x, (128, 3, 8)).view(np.int32))


def test_view_errors_name_the_rule():
    def k(x, what):
        t = nl.ndarray((128, 4, 8), dtype=nl.float32, buffer=nl.sbuf)
        if what == "permute":
            t.permute((1, 0, 2))
        elif what == "broadcast":
            t.broadcast(1, 3)
        else:
            view = t.ap([[32, 128], [1, 64]])  # leaves the tensor: an error when an instruction uses it
            if what == "ap":
                nisa.memset(dst=view, value=0.0)

    run_kernel(k, (_f32(4, 4),), {"what": "ap unused"}, frontend=NKI)  # never used: never reaches the compiler
    with raises_rule("nkisim_view", "permute", "partition dimension first"):
        run_kernel(k, (_f32(4, 4),), {"what": "permute"}, frontend=NKI)
    with raises_rule("nkisim_view", "broadcast", "has size 4, not 1"):
        run_kernel(k, (_f32(4, 4),), {"what": "broadcast"}, frontend=NKI)
    with raises_rule("err_tensor_access_out_of_bound"):
        run_kernel(k, (_f32(4, 4),), {"what": "ap"}, frontend=NKI)


def test_operators_are_errors_naming_the_replacement():
    def k(x, what):
        t = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.sbuf)
        if what == "add":
            return t + t
        t += t

    with pytest.raises(TypeError, match=r"no '\+' operator in the nki API.*nl.add\(x, y\).*nisa.tensor_tensor"):
        run_kernel(k, (_f32(4, 4),), {"what": "add"}, frontend=NKI)
    with pytest.raises(TypeError, match=r"no '\+=' in the nki API.*nisa.nc_matmul\(dst=acc"):
        run_kernel(k, (_f32(4, 4),), {"what": "iadd"}, frontend=NKI)


@pytest.mark.parametrize("name,replacement", [("arange", "nl.ds"), ("mgrid", "access pattern"),
                                              ("par_dim", "partition dimension is always the first"),
                                              ("loop_reduce", "nisa.tensor_tensor")])
def test_removed_language_names(name, replacement):
    with pytest.raises(AttributeError, match=f"has no attribute '{name}'.*{replacement}"):
        getattr(nl, name)


def test_removed_launchers():
    with pytest.raises(AttributeError, match="'benchmark'.*legacy neuronxcc.nki API"):
        nki.benchmark  # noqa: B018


# ---------------------------------------------------------------------------------------------------------------
# API coverage: every documented symbol is implemented or a clear placeholder


def test_every_documented_symbol_is_implemented_or_a_clear_placeholder():
    names = apicoverage.documented(NKI)
    assert len(names) == len(set(names)) > 200
    statuses = {n: apicoverage.status(n, NKI) for n in names}
    assert not [n for n, s in statuses.items() if s == "absent"]
    for name in (n for n, s in statuses.items() if s == "missing"):
        obj = apicoverage.resolve(name, NKI)
        with pytest.raises(NkisimUnsupportedError, match=rf"nkisim does not support .*{name.split('.')[-1]}.* yet"):
            obj(None, None, None) if callable(obj) else obj.anything  # noqa: B018


def test_unknown_names_stay_attribute_errors():
    for mod in (nl, nisa, nki):
        with pytest.raises(AttributeError, match="has no attribute 'no_such_symbol'"):
            mod.no_such_symbol  # noqa: B018
    # NKI dtypes are named values (DType = str in the stub), equal to the NumPy/ml_dtypes type of the same name
    assert nl.bfloat16 == ml_dtypes.bfloat16 and str(nl.bfloat16) == "bfloat16"


def test_no_reorder_block_is_timed_in_program_order():
    """nl.no_reorder() is the legacy ncc.no_reorder() (grading security G9): the block keeps program order."""
    from nkisim.perf import estimate

    big = np.random.default_rng(8).random((128, 8192), dtype=np.float32)
    small = np.random.default_rng(9).random((128, 512), dtype=np.float32)

    def kernel(a, b, guarded):
        t_small = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        t_big = nl.ndarray((128, 8192), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t_small, src=b)  # arrives long before the big load
        nisa.dma_copy(dst=t_big, src=a)
        first = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        second = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        if guarded:
            with nl.no_reorder():
                nisa.tensor_copy(dst=first, src=t_big[:, 0:512], engine=nisa.engine.vector)  # waits for the DMA
                nisa.tensor_scalar(dst=second, data=t_small, op0=nl.add, operand0=1.0)  # ready at once
        else:
            nisa.tensor_copy(dst=first, src=t_big[:, 0:512], engine=nisa.engine.vector)
            nisa.tensor_scalar(dst=second, data=t_small, op0=nl.add, operand0=1.0)
        nisa.tensor_tensor(dst=first, data1=first, data2=second, op=nl.add)
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=first)
        return out

    starts = {}
    for guarded in (False, True):
        run = run_kernel(kernel, (big, small), {"guarded": guarded}, frontend=NKI)
        np.testing.assert_allclose(run.outputs, big[:, 0:512] + small + 1.0, rtol=1e-6)
        estimate(run.trace)
        by_op = {i.op: i for i in run.trace.instrs}
        starts[guarded] = (by_op["tensor_copy"].start_ns, by_op["tensor_scalar"].start_ns)
    assert starts[False][1] < starts[False][0]  # reordered: the ready instruction runs first
    assert starts[True][1] >= starts[True][0]  # in program order inside the block


@pytest.mark.parametrize("live", [False, True])
def test_one_namespace_per_kernel_the_other_way(live):
    """The current API's instructions are wrapped twice (the handle wrapper, the executor's) and, once a process
    has seen registers or dynamic loops (``LIVE``), run through the executor's dispatch: the check looks through
    all of them to name the function the legacy kernel called, whichever tests ran before."""
    import neuronxcc.nki.language as legacy_nl

    from nkisim.core import context
    from nkisim.frontends import LEGACY

    was, context.LIVE[0] = context.LIVE[0], live

    def k(x):
        t = legacy_nl.ndarray((4, 4), dtype=legacy_nl.float32, buffer=legacy_nl.sbuf)
        nisa.dma_copy(dst=t, src=x)

    try:
        with raises_rule("nkisim_mixed_namespaces", "nki.isa.dma_copy", "written for neuronxcc.nki"):
            run_kernel(k, (_f32(4, 4),), frontend=LEGACY)
    finally:
        context.LIVE[0] = was


@pytest.mark.parametrize("case,code,fragments", [
    ("stationary_fmax", "nkisim_matmul_stationary_fmax", ("256", "128")),
    ("partitions", "err_num_partition_mismatch", ("stationary[128, 128]", "moving[64, 128]")),
    ("pairing", "nkisim_matmul_dtype", ("fp32/tf32 operands must pair", "bfloat16")),
    ("dst", "nkisim_dst_mismatch", ("[128, 256]", "[128, 128]")),
])
def test_a_matmul_of_views_checked_before_still_checks_what_lies_between_them(case, code, fragments):
    """Matmuls of views that passed their own checks before (a replay reuses its views from matmul to matmul, and
    nc_matmul skips the dst checks the previous matmul into the same view passed): a view checked in one role is
    checked in another (a moving operand's free size is no stationary's), and the checks between the operands --
    their partitions, the fp32 pairing, the dst's size against the product's -- are made at every matmul."""
    def k(x):
        a = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=a, value=1.0)
        s = a[:, 0:128]
        acc = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=acc, stationary=s, moving=a)  # s, a and acc pass their own checks
        nisa.nc_matmul(dst=acc, stationary=s, moving=a)  # all three remembered
        if case == "stationary_fmax":
            nisa.nc_matmul(dst=acc, stationary=a, moving=a)  # a, checked as a moving operand only
        elif case == "partitions":
            b = nl.ndarray((64, 128), dtype=nl.float32, buffer=nl.sbuf)
            nisa.memset(dst=b, value=1.0)
            acc64 = nl.ndarray((64, 128), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_matmul(dst=acc64, stationary=b[:, 0:64], moving=b)  # b passes as a moving operand
            nisa.nc_matmul(dst=acc, stationary=s, moving=b)
        elif case == "pairing":
            c = nl.ndarray((128, 256), dtype=nl.bfloat16, buffer=nl.sbuf)
            nisa.memset(dst=c, value=1.0)
            nisa.nc_matmul(dst=acc, stationary=c[:, 0:128], moving=c)  # c passes as a moving operand
            nisa.nc_matmul(dst=acc, stationary=s, moving=c)
        else:
            nisa.nc_matmul(dst=acc, stationary=s, moving=s)  # a [128, 128] product into the [128, 256] acc

    with raises_rule(code, *fragments):
        run_kernel(k, (_f32(4, 4),), frontend=NKI)
