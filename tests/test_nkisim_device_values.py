"""No device value reaches the kernel's Python (docs/grading-security.md, S1-S4) and values and costs as the
hardware gives them (V3-V6).

The kernel's Python is a meta-program evaluated at specialization time; registers, dynamic-loop indices and run-time
offsets hold values that exist only when the instructions execute (NKI language guide, "Specialization";
nki.isa.VirtualRegister; nki/deep-dives/nki-dynamic-loops.rst).  Each test below fails on the eager emulator this
replaced (a register's ``value`` attribute, ``.ap(scalar_offset=...)`` folding the value into ``offset`` and
printing it in the bounds error, a dynamic loop running its Python body once per iteration, costs and rules that
depend on the mode).  References are NumPy."""

from __future__ import annotations

import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest

from nkisim.core.runtime import run_kernel
from nkisim.perf import estimate

N = 16
SEEN: list = []


def _k(v: int) -> np.ndarray:
    return np.array([[v]], np.int32)


# ---- S1: registers are names -------------------------------------------------------------------------------------
def test_a_loaded_register_shows_no_value_to_python():
    @nki.jit
    def k(x, k_in):
        k_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=k_sb, src=k_in)
        r = nisa.register_alloc()
        nisa.register_load(r, k_sb)
        SEEN.append((repr(r), sorted(a for a in dir(r) if not a.startswith("__")), getattr(r, "value", None)))
        for conv in (int, bool, float, range):
            with pytest.raises(TypeError, match="not known while the kernel is built"):
                conv(r)
        out = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=k_sb)
        return out

    SEEN.clear()
    k(np.zeros((1, 1), np.float32), _k(1234))
    k(np.zeros((1, 1), np.float32), _k(77))
    (r1, attrs1, v1), (r2, attrs2, v2) = SEEN
    assert v1 is None and v2 is None and "1234" not in r1 and "77" not in r2
    assert attrs1 == attrs2 and "value" not in attrs1


def test_a_register_in_python_control_flow_names_nl_while_loop():
    """A bare ``while reg:`` (the parser front end's dynamic loop) and the same test spelt as a comparison with a
    number (``while reg != 0:``, ``if reg == 3:``) raise the tracer's TypeError naming ``nl.while_loop`` (NKI 0.6
    migration guide: "bare ``while reg:``" -> ``nl.while_loop``).  Before, ``reg != 0`` was Python's identity
    comparison: always True, a Python loop unrolled forever without a word; ``reg == 3`` always False."""
    @nki.jit
    def k(k_in):
        k_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=k_sb, src=k_in)
        r = nisa.register_alloc()
        nisa.register_load(r, k_sb)
        for probe in (lambda: [0 for _ in iter(lambda: bool(r), False)], lambda: r != 0, lambda: r == 3,
                      lambda: r > 0, lambda: 0 < r, lambda: r == np.int32(3)):
            with pytest.raises(TypeError, match=r"nl\.while_loop\(reg, body\)"):
                probe()
        while_r = r
        with pytest.raises(TypeError, match="while reg:"):
            while while_r:
                break
        assert r == r and r != nisa.register_alloc() and r is not None and len({r, r}) == 1  # names among names
        out = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=k_sb)
        return out

    np.testing.assert_array_equal(k(_k(5)), _k(5))


# ---- S2: run-time offsets ----------------------------------------------------------------------------------------
@nki.jit
def row_at(x, k_in):
    """Row k of x, k read from memory into a register: the view's offset is a device value."""
    out = nl.ndarray((1, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    k_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=k_sb, src=k_in)
    r = nisa.register_alloc()
    nisa.register_load(r, k_sb)
    view = x.ap([[x.shape[1], 1], [1, x.shape[1]]], scalar_offset=r, indirect_dim=0)
    SEEN.append(view.is_indirect())
    for probe in (lambda: view.offset, lambda: view[0:1, 0:2], lambda: view.get_pattern()):
        try:
            probe()
            SEEN.append("leaked")
        except Exception as exc:  # noqa: BLE001 - what the kernel sees
            SEEN.append(type(exc).__name__)
    row = nl.ndarray((1, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    try:
        nisa.dma_copy(dst=row, src=view)
    except Exception:  # noqa: BLE001 - a kernel trying to learn whether the offset is in range
        SEEN.append("caught")
    nisa.dma_copy(dst=out, src=row)
    return out


def test_a_run_time_offset_is_resolved_by_the_executor_and_hidden_from_python():
    x = np.arange(8 * 6, dtype=np.float32).reshape(8, 6)
    SEEN.clear()
    np.testing.assert_array_equal(row_at(x, _k(5)), x[5:6])
    assert SEEN == [True, "TypeError", "NKIError", "NKIError"]


@nki.jit
def row_at_kept(x, k_in):
    """Row k of x through a run-time-offset view the kernel keeps (in VIEWS), with its private slots before and
    after the instruction using it."""
    out = nl.ndarray((1, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    k_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=k_sb, src=k_in)
    r = nisa.register_alloc()
    nisa.register_load(r, k_sb)
    view = x.ap([[x.shape[1], 1], [1, x.shape[1]]], scalar_offset=r, indirect_dim=0)
    VIEWS.append(view)
    SEEN.append((view._off, view._v.ctypes.data))
    row = nl.ndarray((1, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=row, src=view)
    SEEN.append((view._off, view._v.ctypes.data))
    nisa.dma_copy(dst=out, src=row)
    return out


VIEWS: list = []


def test_a_run_time_offset_view_keeps_no_resolved_offset_after_the_instruction():
    """Defence in depth (S4): the executor points the view at the register's row for the instruction only; before,
    the view's private ``_off`` (and its storage view) kept the resolved offset (k * row bytes) afterwards."""
    x = np.arange(8 * 6, dtype=np.float32).reshape(8, 6)
    for k in (0, 5):
        SEEN.clear()
        VIEWS.clear()
        np.testing.assert_array_equal(row_at_kept(x, _k(k)), x[k:k + 1])
        (view,) = VIEWS
        assert SEEN[0] == SEEN[1] == (view._off, view._v.ctypes.data)
        assert view._off == 0


@nki.jit
def gather_kept(x, idx_in):
    """Rows idx[p] of x through a vector-offset view the kernel keeps (in VIEWS), with its private gather index
    arrays before and after the instruction using it."""
    P, F = idx_in.shape[0], x.shape[1]
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    idx = nl.ndarray((P, 1), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=idx_in)
    view = x.ap(pattern=[[F, P], [1, F]], vector_offset=idx, indirect_dim=0)
    VIEWS.append(view)
    SEEN.append(tuple(a.tobytes() for a in view._ix))
    rows = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=rows, src=view)
    SEEN.append(tuple(a.tobytes() for a in view._ix))
    nisa.dma_copy(dst=out, src=rows)
    return out


def test_a_vector_offset_view_keeps_no_resolved_rows_after_the_instruction():
    """Defence in depth (S4), as for scalar offsets: the executor points a vector-offset view at the index tile's
    rows for the instruction only; before, its private ``_ix`` kept the executor's row indices afterwards (two index
    tiles, the same arrays before and after each run)."""
    x = np.arange(16 * 4, dtype=np.float32).reshape(16, 4)
    states = []
    for rows in ([3, 0, 15, 7], [9, 9, 1, 2]):
        SEEN.clear()
        VIEWS.clear()
        idx = np.array(rows, np.uint32).reshape(4, 1)
        np.testing.assert_array_equal(gather_kept(x, idx), x[rows])
        before, after = SEEN
        assert before == after
        states.append(after)
    assert states[0] == states[1]


@pytest.mark.parametrize("k", [8, 1 << 20])
def test_an_out_of_range_offset_faults_after_python_returns_without_its_value(k):
    """Before: the bounds error named the offset's value and was raised inside the kernel's dma_copy call."""
    x = np.arange(8 * 6, dtype=np.float32).reshape(8, 6)
    SEEN.clear()
    with pytest.raises(Exception, match="outside its tensor") as err:
        row_at(x, _k(k))
    text = str(err.value)
    assert isinstance(err.value, IndexError) and "DeviceFault" in {c.__name__ for c in type(err.value).__mro__}
    assert "caught" not in SEEN
    assert str(k) not in text and str(k * 6) not in text


def test_a_run_time_offset_is_costed_without_its_value_in_both_modes():
    """The compiler does not know the offset: the DMA's region is the whole tensor, whatever the value, so the
    latency and every operand are the same for every offset and in both modes."""
    x = np.arange(8 * 6, dtype=np.float32).reshape(8, 6)
    runs = [run_kernel(row_at, (x, _k(k)), mode=m) for k in (0, 7) for m in ("full", "timing")]
    regions = {tuple(o.region for i in r.trace for o in (*i.srcs, *i.dsts)) for r in runs}
    assert len(regions) == 1
    assert len({estimate(r.trace).total_us for r in runs}) == 1


# ---- S3: dynamic loops run their Python once -------------------------------------------------------------------------
@nki.jit
def prefix_sum_rows(x, n_in):
    """out[0] = sum of the first n rows of x, with nl.dynamic_range over a register bound; the body's Python counts
    how often it runs and tries to slice and branch with the loop variable."""
    rows, cols = x.shape
    out = nl.ndarray((1, cols), dtype=nl.float32, buffer=nl.shared_hbm)
    n_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=n_sb, src=n_in)
    n = nisa.register_alloc()
    nisa.register_load(n, n_sb)
    acc = nl.ndarray((1, cols), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=acc, value=0.0)
    row = nl.ndarray((1, cols), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.dynamic_range(n):
        SEEN.append(type(i).__name__)
        for probe in (lambda r=i: x[r], lambda r=i: bool(r), lambda r=i: r + 1):
            try:
                probe()
                SEEN.append("leaked")
            except TypeError:
                pass
        nisa.dma_copy(dst=row, src=x.ap([[cols, 1], [1, cols]], scalar_offset=i, indirect_dim=0))
        nisa.tensor_tensor(dst=acc, data1=acc, data2=row, op=nl.add)
    nisa.dma_copy(dst=out, src=acc)
    return out


@pytest.mark.parametrize("n", [0, 1, 5])
def test_a_dynamic_range_body_runs_once_in_python_and_n_times_on_the_device(n):
    x = np.random.default_rng(3).random((6, 8)).astype(np.float32)
    SEEN.clear()
    got = prefix_sum_rows(x, _k(n))
    np.testing.assert_allclose(got, x[:n].sum(axis=0, keepdims=True), rtol=1e-6)
    assert SEEN == ["VirtualRegister"]
    run = run_kernel(prefix_sum_rows, (x, _k(n)))
    assert sum(i.op == "tensor_tensor" for i in run.trace) == n


@nki.jit
def guarded_loop(x, n_in):
    """A kernel that wraps a data-dependent loop in try/except to notice a timing run (where the values needed to
    run it are not computed) and skip the work there."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    n_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=n_sb, src=n_in)
    n = nisa.register_alloc()
    nisa.register_load(n, n_sb)
    try:
        nl.fori_loop(0, n, lambda i: nisa.activation(dst=t, op=nl.exp, data=t))
    except Exception:  # noqa: BLE001
        SEEN.append("timing run noticed")
    nisa.dma_copy(dst=out, src=t)
    return out


def test_a_timing_run_is_not_observable_through_a_dynamic_loop():
    x = np.zeros((128, 64), np.float32)
    SEEN.clear()
    full = run_kernel(guarded_loop, (x, _k(3)))
    timed = run_kernel(guarded_loop, (x, _k(3)), mode="timing")
    assert SEEN == []
    assert [i.op for i in timed.trace] == [i.op for i in full.trace]
    assert sum(i.op == "activation" for i in timed.trace) == 3


def test_a_break_out_of_a_dynamic_loop_is_refused():
    @nki.jit
    def k(x):
        for _ in nl.dynamic_range(4):
            break
        return x

    with pytest.raises(Exception, match="must run to its end"):
        k(np.zeros((1, 1), np.float32))


# ---- S4: rules and costs do not depend on the mode ----------------------------------------------------------------
@nki.jit
def accumulate_onto_nothing(a):
    out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    ps = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=ps, stationary=t, moving=t, accumulate=True)
    r = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=r, src=ps)
    nisa.dma_copy(dst=out, src=r)
    return out


@pytest.mark.parametrize("mode", ["full", "timing"])
def test_the_uninitialised_accumulate_rule_fires_in_both_modes(mode):
    """Before: only in full mode (the flags were kept with the values), so a timed run was costed."""
    with pytest.raises(Exception, match="accumulate"):
        run_kernel(accumulate_onto_nothing, (np.ones((128, 128), np.float32),), mode=mode)


# ---- V4: accumulate=None onto a memset starts the group --------------------------------------------------------
@nki.jit
def matmul_over_memset(a, b, accumulate):
    out = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.shared_hbm)
    at = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
    bt = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=at, src=a)
    nisa.dma_copy(dst=bt, src=b)
    ps = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.psum)
    nisa.memset(dst=ps, value=5.0)
    nisa.nc_matmul(dst=ps, stationary=at, moving=bt, accumulate=accumulate)
    nisa.nc_matmul(dst=ps, stationary=at, moving=bt, accumulate=accumulate)
    r = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=r, src=ps)
    nisa.dma_copy(dst=out, src=r)
    return out


def test_accumulate_none_onto_a_memset_overwrites_then_accumulates():
    """accumulate=None: "first write overwrites, subsequent writes accumulate" (nki.isa.nc_matmul); a memset is not
    a matmul write (before: the matmuls added onto the 5.0 the memset left)."""
    rng = np.random.default_rng(5)
    a, b = rng.random((128, 128)).astype(np.float32), rng.random((128, 256)).astype(np.float32)
    np.testing.assert_allclose(matmul_over_memset(a, b, None), 2 * (a.T @ b), rtol=1e-5)
    np.testing.assert_allclose(matmul_over_memset(a, b, False), a.T @ b, rtol=1e-5)
    with pytest.raises(Exception, match="initialised by a non-matmul instruction"):
        matmul_over_memset(a, b, True)


# ---- V3: tf32 --------------------------------------------------------------------------------------------------
def _matmul_kernel(dt):
    @nki.jit
    def k(a, b):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        at = nl.ndarray((128, 128), dtype=dt, buffer=nl.sbuf)
        bt = nl.ndarray((128, 512), dtype=dt, buffer=nl.sbuf)
        nisa.dma_copy(dst=at, src=a)
        nisa.dma_copy(dst=bt, src=b)
        ps = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=ps, stationary=at, moving=bt)
        r = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=r, src=ps)
        nisa.dma_copy(dst=out, src=r)
        return out

    return k


def _round_tf32(x: np.ndarray) -> np.ndarray:
    """Independent reference: round-to-nearest-even to 10 mantissa bits through float64 arithmetic."""
    m, e = np.frexp(x.astype(np.float64))
    return np.ldexp(np.round(m * 2.0 ** 11) / 2.0 ** 11, e).astype(np.float32)


def test_tf32_operands_are_rounded_and_run_at_the_16_bit_rate():
    """nl.tfloat32 is 1S/8E/10M and runs at the BF16/FP16 rate (trainium2_arch.rst: "79 BF16/FP16/TF32 and 20 FP32
    dense TFLOPS"); before, tf32 tiles were exact fp32."""
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((128, 128)).astype(np.float32), rng.standard_normal((128, 512)).astype(np.float32)
    want = _round_tf32(a).T.astype(np.float64) @ _round_tf32(b)
    got = run_kernel(_matmul_kernel(nl.tfloat32), (a, b))
    np.testing.assert_allclose(got.outputs, want, rtol=1e-5, atol=1e-4)
    assert np.abs(got.outputs - a.T.astype(np.float64) @ b).max() > 1e-3  # not fp32-exact
    tf32, bf16, fp32 = (estimate(run_kernel(_matmul_kernel(dt), (a, b), mode="timing").trace).total_us
                        for dt in (nl.tfloat32, nl.bfloat16, nl.float32))
    assert tf32 < fp32 and abs(tf32 - bf16) < 0.05 * bf16


# ---- V6: one DMA floor for the model and the plausibility guard -------------------------------------------------
@pytest.mark.parametrize("target", ["trn2", "trn1"])
def test_a_single_hbm_to_hbm_copy_is_never_modelled_below_the_guards_dma_floor(target):
    """Before: a [2048, 2048] fp32 HBM -> HBM dma_copy modelled at 60.4 us (trn2) under the guard's 91.2 us floor."""
    from nkisim.perf.costs import costs_for, dma_floor_us

    @nki.jit
    def copy(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=a)
        return out

    for shape in ((128, 512), (2048, 2048)):
        a = np.ones(shape, np.float32)
        latency = estimate(run_kernel(copy, (a,), mode="timing", target=target).trace, target).nc_latency_us
        assert latency >= dma_floor_us(costs_for(target), 2 * a.nbytes)


# ---- S4 in the legacy API: tile-indexed (dynamic) gathers ----------------------------------------------------------
LEGACY_SEEN: list = []


def _legacy_gather():
    import neuronxcc.nki as lnki
    import neuronxcc.nki.language as lnl

    @lnki.jit
    def gather_rows(table, idx_in):
        """Rows of ``table`` at indices loaded from the input: the view's ``oob`` and any error the gather raises
        are what the kernel's Python can observe."""
        i_f = lnl.arange(table.shape[1])[None, :]
        idx = lnl.load(idx_in)
        view = table[idx, i_f]
        LEGACY_SEEN.append(view.oob)
        try:
            rows = lnl.load(view)
        except Exception:  # noqa: BLE001 - a kernel trying to learn whether an index is in range
            LEGACY_SEEN.append("caught")
            rows = lnl.load(table[0:128, :])
        out = lnl.ndarray((128, table.shape[1]), dtype=lnl.float32, buffer=lnl.shared_hbm)
        lnl.store(out, rows)
        return out

    return gather_rows


def _rows(values) -> np.ndarray:
    return np.asarray(values, np.int32).reshape(128, 1)


def test_legacy_dynamic_indices_show_python_nothing_and_fault_after_it_returns():
    """Before: ``view.oob`` was computed from the index values and the bounds error (naming them) was raised inside
    the kernel's ``nl.load``, which the kernel could catch."""
    table = np.random.default_rng(2).random((256, 64), dtype=np.float32)
    kernel = _legacy_gather()
    ok = _rows(np.arange(128) * 2)
    LEGACY_SEEN.clear()
    np.testing.assert_array_equal(kernel(table, ok), table[np.arange(128) * 2])
    bad = _rows(np.r_[np.arange(127), 1000])
    with pytest.raises(Exception, match="lies outside the tensor") as err:
        kernel(table, bad)
    assert "DeviceFault" in {c.__name__ for c in type(err.value).__mro__} and "1000" not in str(err.value)
    assert LEGACY_SEEN == [False, False]


def test_legacy_dynamic_gathers_are_costed_without_their_indices():
    """The gather's operand (region, runs) comes from the stand-in indices in both modes: the same latency for any
    index values and mode (before: the actual indices' bounding box in full mode)."""
    table = np.random.default_rng(2).random((256, 64), dtype=np.float32)
    kernel = _legacy_gather()
    runs = [run_kernel(kernel, (table, _rows(ix)), mode=mode)
            for ix in (np.zeros(128), np.arange(128) + 128) for mode in ("full", "timing")]
    assert len({tuple(o.region for i in r.trace for o in (*i.srcs, *i.dsts)) for r in runs}) == 1
    assert len({estimate(r.trace).total_us for r in runs}) == 1


# ---- every launch mode -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("launch", ["call", "nki.simulate", "NKI_SIMULATOR", "lnc2"])
def test_every_current_api_launch_keeps_device_values_from_python(launch, monkeypatch):
    x = np.arange(8 * 6, dtype=np.float32).reshape(8, 6)
    if launch == "NKI_SIMULATOR":
        monkeypatch.setenv("NKI_SIMULATOR", "1")
    kernel = {"nki.simulate": nki.simulate(row_at), "lnc2": row_at[2]}.get(launch, row_at)
    SEEN.clear()
    np.testing.assert_array_equal(kernel(x, _k(5)), x[5:6])
    with pytest.raises(IndexError, match="outside its tensor"):
        kernel(x, _k(9))
    assert "caught" not in SEEN and "leaked" not in SEEN


@pytest.mark.parametrize("launch", ["jit", "baremetal", "simulate_kernel"])
def test_every_legacy_launch_keeps_dynamic_indices_from_python(launch):
    import neuronxcc.nki as lnki

    table = np.random.default_rng(2).random((256, 64), dtype=np.float32)
    kernel = _legacy_gather()
    bad = _rows(np.r_[np.arange(127), 1000])
    LEGACY_SEEN.clear()
    with pytest.raises(IndexError, match="lies outside the tensor"):
        if launch == "baremetal":
            lnki.baremetal(kernel)(table, bad)
        elif launch == "simulate_kernel":
            lnki.simulate_kernel(kernel, table, bad)
        else:
            kernel(table, bad)
    assert LEGACY_SEEN == [False]


def test_a_dynamic_loop_body_cannot_hand_the_executor_kernel_code():
    """An argument of the kernel's own class would have its methods called by the executor once per iteration
    (a ``__float__`` counting the trip count): refused when the body is recorded."""
    class Counter:
        def __float__(self):
            SEEN.append("ran")
            return 1.0

    @nki.jit
    def k(x):
        t = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
        nl.fori_loop(0, 3, lambda i: nisa.memset(dst=t, value=Counter()))
        out = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    SEEN.clear()
    with pytest.raises(NotImplementedError, match="passing a Counter"):
        k(np.zeros((1, 1), np.float32))
    assert SEEN == []


class _Holder:
    def method(self):
        SEEN.append("ran")
        return 1.0


def _kernel_code_wrappers():
    """Objects of Python's or NumPy's own types that run kernel code when the front end uses them."""
    def f(*args):
        SEEN.append("ran")
        return 1.0

    return {"bound method": _Holder().method, "generator": (f() for _ in range(3)), "map": map(f, [1, 2, 3]),
            "callable iterator": iter(f, None), "np.vectorize": np.vectorize(f),
            "np.frompyfunc": np.frompyfunc(f, 1, 1), "builtin bound method": [1.0].pop, "staticmethod": staticmethod(f)}


@pytest.mark.parametrize("what", sorted(_kernel_code_wrappers()))
def test_a_dynamic_loop_body_cannot_hand_the_executor_kernel_code_in_a_builtin_wrapper(what):
    """The same check, by what the argument is rather than by the module of its type: before, every object whose type
    lives in ``builtins`` (bound methods, generators, ``map``, ``iter(f, sentinel)``, ``staticmethod``) or in NumPy
    (``np.vectorize``, ``np.frompyfunc`` ufuncs) passed, although each holds kernel code the executor's calls would
    run once per iteration.  NumPy's own functions and ufuncs, and module-level builtins, still pass."""
    wrapper = _kernel_code_wrappers()[what]

    @nki.jit
    def k(x):
        t = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
        nl.fori_loop(0, 3, lambda i: nisa.memset(dst=t, value=wrapper))
        out = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    SEEN.clear()
    with pytest.raises(NotImplementedError, match="nkisim does not support passing a"):
        k(np.zeros((1, 1), np.float32))
    assert SEEN == []

    @nki.jit
    def library(x):
        t = nl.ndarray((1, 4), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        nl.fori_loop(0, 3, lambda i: nisa.tensor_scalar(dst=t, data=t, op0=np.add, operand0=max(1.0, 0.5)))
        out = nl.ndarray((1, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    np.testing.assert_array_equal(library(np.zeros((1, 4), np.float32)), np.full((1, 4), 3.0, np.float32))


@nki.jit
def deep_dive_runtime_trip_count(input_tensor):
    """The "Runtime trip count from a VirtualRegister" example of AWS's dynamic-loops deep dive
    (nki/deep-dives/nki-dynamic-loops.rst): rows [i, i + 128) of a 512 x 512 input plus 2.0, i = 0, 128, 256, 384."""
    out_tensor = nl.ndarray((512, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    start = nisa.register_alloc(0)
    stop = nisa.register_alloc(512)
    for i in nl.dynamic_range(start, stop, 128):
        tile = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        result = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(src=input_tensor.ap([[512, 128], [1, 512]], scalar_offset=i), dst=tile)
        nisa.tensor_scalar(dst=result, data=tile, op0=nl.add, operand0=2.0)
        nisa.dma_copy(src=result, dst=out_tensor.ap([[512, 128], [1, 512]], scalar_offset=i))
    return out_tensor


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_the_dynamic_loops_deep_dive_example_runs_as_documented():
    x = np.random.default_rng(11).random((512, 512), dtype=np.float32)
    np.testing.assert_allclose(deep_dive_runtime_trip_count(x), x + 2.0, rtol=1e-6)
    run = run_kernel(deep_dive_runtime_trip_count, (x,), mode="timing")
    assert sum(i.op == "tensor_scalar" for i in run.trace) == 4


def test_item_assignment_into_a_run_time_offset_view_writes_where_the_register_points():
    """``dst[...] = tile`` is an instruction too: its run-time-offset destination is resolved by the executor."""
    @nki.jit
    def k(x, k_in):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        zeros = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.memset(dst=zeros, value=0.0)
        nisa.dma_copy(dst=out, src=zeros)
        k_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=k_sb, src=k_in)
        r = nisa.register_alloc()
        nisa.register_load(r, k_sb)
        row = nl.load(x[0:1, :])
        out.ap([[x.shape[1], 1], [1, x.shape[1]]], scalar_offset=r, indirect_dim=0)[...] = row
        return out

    x = np.arange(4 * 6, dtype=np.float32).reshape(4, 6)
    want = np.zeros_like(x)
    want[2] = x[0]
    np.testing.assert_array_equal(k(x, _k(2)), want)


# ---- dynamic-loop bodies replay what the compiler inserts, as the same body unrolled --------------------------------
def _body_kernel(body_of, dynamic: bool, n: int = 3):
    """A kernel running ``body(i)`` n times, in a dynamic loop (nl.fori_loop) or unrolled (Python range), then
    ``after()``: ``body, after = body_of(tiles)``."""
    @nki.jit
    def k(a, b, row):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        a_s = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
        b_s = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        r_s = nl.ndarray((1, 512), dtype=nl.float32, buffer=nl.sbuf)
        acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=a_s, src=a)
        nisa.dma_copy(dst=b_s, src=b)
        nisa.dma_copy(dst=r_s, src=row)
        nisa.memset(dst=acc, value=0.0)
        body, after = body_of(a_s, b_s, r_s, acc)
        if dynamic:
            nl.fori_loop(0, n, body)
        else:
            for i in range(n):
                body(i)
        after()
        nisa.dma_copy(dst=out, src=acc)
        return out

    return k


def _broadcast_in_no_reorder(a_s, b_s, r_s, acc):
    def body(i):
        with nl.no_reorder():
            nisa.tensor_tensor(dst=acc, data1=acc, data2=r_s.broadcast_to((128, 512)), op=nl.add)
            nisa.tensor_tensor(dst=acc, data1=acc, data2=b_s, op=nl.add)
    return body, lambda: None


def _spilled_psum(a_s, b_s, r_s, acc):
    held = []
    for _ in range(8):  # every PSUM bank held by a live tile: the body's tile gets none (a compiler spill)
        p = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=p, stationary=a_s, moving=b_s)
        held.append(p)

    def body(i):
        ps = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=ps, stationary=a_s, moving=b_s)
        nisa.tensor_tensor(dst=acc, data1=acc, data2=ps, op=nl.add)

    def after():  # the held tiles stay live across the loop
        for p in held:
            nisa.tensor_tensor(dst=acc, data1=acc, data2=p, op=nl.add)
    return body, after


def _body_psum(a_s, b_s, r_s, acc):
    def body(i):
        ps = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=ps, stationary=a_s, moving=b_s)
        nisa.tensor_tensor(dst=acc, data1=acc, data2=ps, op=nl.add)
    return body, lambda: None


@pytest.mark.parametrize("body_of, expect", [
    (_broadcast_in_no_reorder, lambda a, b, row: 3 * (b + row)),
    (_spilled_psum, lambda a, b, row: 11 * (a.T @ b)),
])
def test_a_dynamic_loop_body_replays_the_compilers_insertions_as_unrolled(body_of, expect):
    """A partition broadcast first made in a dynamic-loop body (its [1, P] ones memset), a PSUM tile the body
    allocates that gets no bank (the compiler's spill copy) and a ``no_reorder`` block in the body: the recorded body
    replays them as the same body unrolled in a static loop has them: identical values, instructions (operation,
    engine, program-order flag, spill flag) and modelled latency, in both modes.  Before, the broadcast's ones were
    made in the recorder's scratch trace (the executed iterations were served the wrong allocations: a NumPy
    broadcast error), the spill copy landed outside the body (the loop was refused) and the block's instructions
    were not kept in program order."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((128, 128)).astype(np.float32)
    b = rng.standard_normal((128, 512)).astype(np.float32)
    row = rng.standard_normal((1, 512)).astype(np.float32)
    from nkisim import frontends

    runs = {}
    for dynamic in (False, True):
        for mode in ("full", "timing"):
            runs[dynamic, mode] = run_kernel(_body_kernel(body_of, dynamic), (a, b, row), {}, frontend=frontends.NKI,
                                             mode=mode)
    np.testing.assert_allclose(runs[True, "full"].outputs, expect(a, b, row), rtol=1e-4, atol=1e-3)
    np.testing.assert_array_equal(runs[True, "full"].outputs, runs[False, "full"].outputs)

    def shape(trace):
        return [(i.op, i.engine, bool(i.attrs.get("in_order")), bool(i.attrs.get("psum_spill"))) for i in trace.instrs]

    for mode in ("full", "timing"):
        static, dynamic = runs[False, mode].trace, runs[True, mode].trace
        assert shape(dynamic) == shape(static)
        assert estimate(dynamic, "trn2").nc_latency_us == estimate(static, "trn2").nc_latency_us
    flags = [f for f in shape(runs[True, "full"].trace)]
    assert any(f[2] for f in flags) if body_of is _broadcast_in_no_reorder else sum(f[3] for f in flags) == 3


def test_a_psum_tile_a_dynamic_loop_body_allocates_starts_each_iteration_fresh():
    """The body allocates a PSUM tile and matmuls into it with the default accumulate: unrolled, each iteration's
    tile is new and the matmul overwrites it; the device's one body reuses the memory with the compiler's flag (a new
    accumulation group).  Before, the executor kept the flags across iterations and the second iteration accumulated
    (3 + 2 + 1 products instead of 3)."""
    rng = np.random.default_rng(4)
    a = rng.standard_normal((128, 128)).astype(np.float32)
    b = rng.standard_normal((128, 512)).astype(np.float32)
    row = np.zeros((1, 512), np.float32)
    from nkisim import frontends

    got = run_kernel(_body_kernel(_body_psum, True), (a, b, row), {}, frontend=frontends.NKI).outputs
    np.testing.assert_allclose(got, 3 * (a.T @ b), rtol=1e-4, atol=1e-3)


# ---- S10: a check on the values is a fault, never an exception in the kernel's Python -------------------------------
@pytest.mark.parametrize("api", ["nki", "legacy"])
def test_a_broken_matmul_promise_is_a_fault_the_kernel_cannot_catch(api):
    """``is_stationary_onezero=True`` on a tile that is not all 0/1: before, the promise error was raised inside the
    call, naming the first other value and its position, so a ``try`` around a hinted matmul read any tile
    (tests/hostile/promise_probe_nki scored 10).  Now the call returns, the kernel's Python goes on unaware, and
    the rule's error (no value, no position) is raised once it has returned; a 0/1 tile keeps the hint."""
    import neuronxcc.nki as lnki
    import neuronxcc.nki.isa as lnisa
    import neuronxcc.nki.language as lnl

    from nkisim import frontends
    from nkisim.core.rules import NKIError

    def probe(mm):
        try:
            mm()
            SEEN.append("returned")
        except Exception as exc:  # noqa: BLE001 - what a kernel could learn
            SEEN.append(str(exc))

    if api == "nki":
        @nki.jit
        def k(s_in, m_in):
            s = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
            m = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=s, src=s_in)
            nisa.dma_copy(dst=m, src=m_in)
            ps = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
            probe(lambda: nisa.nc_matmul(dst=ps, stationary=s, moving=m, is_stationary_onezero=True))
            sb = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=sb, src=ps)
            out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
            nisa.dma_copy(dst=out, src=sb)
            return out

        fe = frontends.NKI
    else:
        @lnki.jit
        def k(s_in, m_in):
            s, m = lnl.load(s_in), lnl.load(m_in)
            box = []
            probe(lambda: box.append(lnisa.nc_matmul(s, m, is_stationary_onezero=True)))
            out = lnl.ndarray((128, 512), dtype=lnl.float32, buffer=lnl.shared_hbm)
            lnl.store(out, lnl.copy(box[0]) if box else lnl.zeros((128, 512), dtype=lnl.float32))
            return out

        fe = frontends.LEGACY
    rng = np.random.default_rng(5)
    m = rng.random((128, 512), dtype=np.float32)
    SEEN.clear()
    zero_one = (rng.random((128, 128)) < 0.5).astype(np.float32)
    np.testing.assert_allclose(run_kernel(k, (zero_one, m), {}, frontend=fe).outputs, zero_one.T @ m, rtol=1e-5)
    s = zero_one.copy()
    s[3, 7] = 0.625
    with pytest.raises(NKIError, match="holds values other than ones and zeros") as err:
        run_kernel(k, (s, m), {}, frontend=fe)
    assert err.value.code == "nkisim_matmul_onezero_hint" and "0.625" not in str(err.value)
    assert SEEN == ["returned", "returned"]


def test_an_error_of_the_values_is_a_fault_and_a_rules_error_is_not(monkeypatch):
    """The front end's calls tell an exception out of the values (a NumPy error on some data) from a rule broken
    whatever the data by running the call again without values: the first is a fault raised once the kernel's Python
    has returned (no text of it), the second is raised in the call as before.  Simulated here by a value step that
    fails on large data."""
    from nkisim import frontends
    from nkisim.core.ops import tensor_engine
    from nkisim.core.rules import DeviceFault

    real = tensor_engine._matrix  # a matmul operand's values, as multiplied

    def fragile(raw, dtype_name, k, n, slot, view=None):
        v = real(raw, dtype_name, k, n, slot, view)
        if (v > 0.99).any():
            raise FloatingPointError(f"value {float(v.max())!r} too large")
        return v

    monkeypatch.setattr(tensor_engine, "_matrix", fragile)

    @nki.jit
    def k(s_in):
        s = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=s, src=s_in)
        ps = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum)
        try:
            nisa.nc_matmul(dst=ps, stationary=s, moving=s)
            SEEN.append("returned")
        except FloatingPointError as exc:
            SEEN.append(str(exc))
        try:
            nisa.nc_matmul(dst=ps, stationary=s, moving=s[:, 0:64], accumulate=7)  # a rule: raised in the call
        except Exception as exc:  # noqa: BLE001
            SEEN.append(type(exc).__name__)
        sb = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=sb, src=ps)
        out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=sb)
        return out

    small = np.full((128, 128), 0.5, np.float32)
    SEEN.clear()
    run_kernel(k, (small,), {}, frontend=frontends.NKI)
    clean = list(SEEN)
    big = small.copy()
    big[5, 5] = 1.5
    SEEN.clear()
    with pytest.raises(DeviceFault, match="FloatingPointError while the device program computed") as err:
        run_kernel(k, (big,), {}, frontend=frontends.NKI)
    assert "1.5" not in str(err.value)
    assert SEEN == clean and SEEN[0] == "returned" and SEEN[1] != "returned"


@pytest.mark.parametrize("mode", ["full", "timing"])
def test_device_print_runs_no_kernel_code_that_tells_the_mode(mode, capsys):
    """S11: ``nl.device_print(prefix, t)`` printed ``prefix`` only when values are computed, so ``__str__`` of a
    prefix of the kernel's class (the one dunder a helper class may define besides ``__init__``/``__repr__``) ran
    only in full mode: a kernel counting its calls knew whether it was being timed without values.  Now the prefix
    is made text at the call, in both modes.  The current API takes only a string ("must be a constant string",
    nl.device_print, NKI 0.6): there an object prefix is refused before anything of it runs, in both modes; the
    legacy API still takes one, and runs its ``__str__`` once, in both modes."""
    import neuronxcc.nki as lnki
    import neuronxcc.nki.language as lnl

    from nkisim import frontends

    class Label:
        def __str__(self):
            SEEN.append("str")
            return "label"

    @nki.jit
    def k(x):
        t = nl.ndarray((1, 4), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        nl.device_print(Label(), t)
        out = nl.ndarray((1, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    @lnki.jit
    def legacy(x):
        t = lnl.load(x)
        lnl.device_print(Label(), t)
        out = lnl.ndarray((1, 4), dtype=lnl.float32, buffer=lnl.shared_hbm)
        lnl.store(out, value=t)
        return out

    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    SEEN.clear()
    with pytest.raises(TypeError, match="print_prefix must be a constant string"):
        run_kernel(k, (x,), {}, frontend=frontends.NKI, mode=mode)
    assert SEEN == []
    run_kernel(legacy, (x,), {}, frontend=frontends.LEGACY, mode=mode)
    assert SEEN == ["str"]
    assert ("label [[0. 1. 2. 3.]]" in capsys.readouterr().out) == (mode == "full")


def test_a_registers_name_is_read_only():
    """C12 for registers: a register is a name (``rid``) keying its value in the executor; kernel code could set it
    to another register's and alias that register's executor slot.  Read-only now, as a tensor's public fields."""
    from nkisim import frontends

    @nki.jit
    def k(x):
        r, other = nisa.register_alloc(1), nisa.register_alloc(2)
        for forge in (lambda: setattr(r, "rid", other.rid), lambda: delattr(r, "rid")):
            with pytest.raises(AttributeError, match="readonly attribute"):
                forge()
        SEEN.append(r.rid != other.rid)
        out = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=x)
        return out

    SEEN.clear()
    run_kernel(k, (np.zeros((1, 1), np.float32),), {}, frontend=frontends.NKI)
    assert SEEN == [True]


@pytest.mark.parametrize("mode", ["full", "timing"])
@pytest.mark.parametrize("view, ok", [
    (lambda out: out, True),
    (lambda out: out.reshape((8, 4)), True),
    (lambda out: out.permute((1, 0)), False),
    (lambda out: out[0:2, :], False),
    (lambda out: out[:, 0:8:2], False),
    (lambda out: out.ap([[1, 8], [8, 4]]), False),
])
def test_a_kernel_returns_its_output_tensors_storage_not_a_view_of_it(view, ok, mode):
    """S12: a view copies no data ("share the same underlying storage -- no data is copied", nki.language.NkiTensor),
    so what the host receives is the output tensor's storage as it lies.  Before, nkisim handed the host a
    returned view's values: out.permute((1, 0)) after a contiguous copy was a transpose no instruction made
    (tests/hostile/return_view_nki: 12 points).  The tensor and its reshapes pass; permuted, partial and strided
    views are refused, in both modes."""
    from nkisim_util import raises_rule

    from nkisim import frontends

    @nki.jit
    def k(x):
        out = nl.ndarray((4, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=x)
        return view(out)

    x = np.arange(32, dtype=np.float32).reshape(4, 8)
    if ok:
        run = run_kernel(k, (x,), {}, frontend=frontends.NKI, mode=mode)
        if mode == "full":
            np.testing.assert_array_equal(np.asarray(run.outputs).reshape(-1), x.reshape(-1))
    else:
        with raises_rule("nkisim_output_view", "view of its tensor"):
            run_kernel(k, (x,), {}, frontend=frontends.NKI, mode=mode)
