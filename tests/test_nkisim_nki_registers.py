"""Engine-sequencer registers and dynamic loops of the current API (``nisa.register_*``, ``nisa.VirtualRegister``,
``nl.fori_loop``, ``nl.while_loop``, ``nl.dynamic_range`` over a register), in the style of the NKI 0.6 API
reference's own examples, checked against NumPy."""

from __future__ import annotations

import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest

from nkisim.core.rules import DeviceFault, NKIError
from nkisim.core.runtime import run_kernel
from nkisim.perf import estimate


@nki.jit
def count_down(data, count_input):
    """The nl.while_loop docs' example: add ``data`` to an accumulator ``count`` times, the loop condition being
    the count reloaded into the register after each decrement."""
    out = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    val = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=val, src=data)
    acc = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=acc, value=0.0)
    count_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=count_sb, src=count_input)
    one_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=one_sb, value=1)
    reg = nisa.register_alloc()
    nisa.register_load(reg, count_sb)

    def body(r):
        nisa.tensor_tensor(dst=acc, data1=acc, data2=val, op=nl.add)
        nisa.tensor_tensor(dst=count_sb, data1=count_sb, data2=one_sb, op=nl.subtract)
        nisa.register_load(r, count_sb)
        return r

    nl.while_loop(reg, body)
    nisa.dma_copy(dst=out, src=acc)
    return out


@pytest.mark.parametrize("count", [0, 1, 5])
def test_while_loop_runs_while_the_register_is_nonzero(count):
    got = count_down(np.array([[2.5]], np.float32), np.array([[count]], np.int32))
    np.testing.assert_array_equal(got, np.array([[2.5 * count]], np.float32))


def test_a_timing_run_of_a_data_dependent_loop_computes_the_values():
    args = (np.array([[1.0]], np.float32), np.array([[3]], np.int32))
    full = run_kernel(count_down, args)
    timed = run_kernel(count_down, args, mode="timing")
    assert timed.outputs is None
    assert [i.op for i in timed.trace] == [i.op for i in full.trace]
    assert sum(i.op == "register_load" for i in full.trace) == 4  # the first load and one per iteration
    assert estimate(timed.trace).total_us == pytest.approx(estimate(full.trace).total_us)


VISITS: list = []


@nki.jit
def running_rows(x, n_input):
    """nl.fori_loop up to a bound loaded into a register: row i of the output is row i of x plus i (the loop
    register stored into a tensor, the rows addressed by run-time offsets), rows past the bound stay zero.  The
    Python body runs once (it is traced; the device repeats it), so ``VISITS`` grows by one whatever the bound."""
    rows, cols = x.shape
    out = nl.ndarray((rows, cols), dtype=nl.float32, buffer=nl.shared_hbm)
    zeros = nl.ndarray((rows, cols), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=zeros, value=0.0)
    nisa.dma_copy(dst=out, src=zeros)
    n_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=n_sb, src=n_input)
    ub = nisa.register_alloc()
    nisa.register_load(ub, n_sb)
    row = nl.ndarray((1, cols), dtype=nl.float32, buffer=nl.sbuf)
    i_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    i_f = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)

    def body(i):
        VISITS.append(i)
        nisa.register_store(i_sb, i)
        nisa.tensor_copy(dst=i_f, src=i_sb)
        nisa.dma_copy(dst=row, src=x.ap([[cols, 1], [1, cols]], scalar_offset=i, indirect_dim=0))
        nisa.tensor_scalar(dst=row, data=row, op0=nl.add, operand0=i_f)
        nisa.dma_copy(dst=out.ap([[cols, 1], [1, cols]], scalar_offset=i, indirect_dim=0), src=row)

    nl.fori_loop(0, ub, body)
    return out


@pytest.mark.parametrize("n", [0, 4])
def test_fori_loop_with_a_register_bound_matches_numpy_and_runs_its_python_once(n):
    x = np.arange(6 * 4, dtype=np.float32).reshape(6, 4)
    VISITS.clear()
    got = running_rows(x, np.array([[n]], np.int32))
    want = np.zeros_like(x)
    want[:n] = x[:n] + np.arange(n, dtype=np.float32)[:, None]
    np.testing.assert_array_equal(got, want)
    assert len(VISITS) == 1


@nki.jit
def registers_roundtrip(x):
    """register_alloc(int), register_move (immediate and register), register_load (a float rounds to nearest
    even: NKI 0.6's fp32-to-integer casts) and register_store (cast to the destination), dynamic_range over
    registers: the device counts its iterations in a tile, the Python body runs once (``n``)."""
    out = nl.ndarray((1, 5), dtype=nl.int32, buffer=nl.shared_hbm)
    res = nl.ndarray((1, 5), dtype=nl.int32, buffer=nl.sbuf)
    a = nisa.register_alloc(7)
    b = nisa.register_alloc()
    nisa.register_move(b, a)
    c = nisa.register_alloc()
    nisa.register_move(c, -3)
    xs = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=xs, src=x)
    d = nisa.register_alloc()
    nisa.register_load(d, xs)
    count = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=count, value=0)
    n = 0
    for _ in nl.dynamic_range(c, b):  # -3 .. 6
        n += 1
        nisa.tensor_scalar(dst=count, data=count, op0=nl.add, operand0=1)
    e = nisa.register_alloc(n)
    for j, r in enumerate((b, c, d, e)):
        nisa.register_store(res[0:1, j:j + 1], r)
    nisa.tensor_copy(dst=res[0:1, 4:5], src=count)
    nisa.dma_copy(dst=out, src=res)
    return out


def test_register_moves_loads_and_stores():
    got = registers_roundtrip(np.array([[9.75]], np.float32))
    np.testing.assert_array_equal(got, np.array([[7, -3, 10, 1, 10]], np.int32))  # 9.75 -> 10


def test_registers_refuse_python_control_flow():
    @nki.jit
    def k(x):
        r = nisa.register_alloc(3)
        for _ in range(r):
            pass
        return x

    with pytest.raises(TypeError, match="not known while the kernel is built"):
        k(np.zeros((1, 1), np.float32))


def test_register_load_needs_one_element():
    @nki.jit
    def k(x):
        t = nl.ndarray((1, 2), dtype=nl.int32, buffer=nl.sbuf)
        nisa.memset(dst=t, value=0)
        nisa.register_load(nisa.register_alloc(), t)
        return x

    with pytest.raises(Exception, match="exactly one element"):
        k(np.zeros((1, 1), np.float32))


def test_fori_loop_step_must_be_positive():
    @nki.jit
    def k(x):
        nl.fori_loop(0, 4, lambda i: None, step=0)
        return x

    with pytest.raises(ValueError, match="positive"):
        k(np.zeros((1, 1), np.float32))


N_ELEMS = 16


@nki.jit
def fori_copy_prefix(data, ub_input):
    """The nl.fori_loop docs' example: copy element i of data to element i of the output for i < ub, addressing
    both through ``.ap(..., scalar_offset=i, indirect_dim=1)``."""
    output = nl.ndarray((1, N_ELEMS), dtype=nl.float32, buffer=nl.shared_hbm)
    ub_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=ub_sb, src=ub_input)
    ub_reg = nisa.register_alloc()
    nisa.register_load(ub_reg, ub_sb)
    zeros = nl.zeros((1, N_ELEMS), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=output, src=zeros)
    temp = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)

    def body(i):
        nisa.dma_copy(dst=temp, src=data.ap([[1, 1], [1, 1]], scalar_offset=i, indirect_dim=1))
        nisa.dma_copy(dst=output.ap([[1, 1], [1, 1]], scalar_offset=i, indirect_dim=1), src=temp)

    nl.fori_loop(0, ub_reg, body)
    return output


@pytest.mark.parametrize("ub", [0, 5, N_ELEMS])
def test_fori_loop_docs_example_with_scalar_offsets(ub):
    data = np.arange(1, N_ELEMS + 1, dtype=np.float32).reshape(1, N_ELEMS)
    got = fori_copy_prefix(data, np.array([[ub]], np.int32))
    want = np.where(np.arange(N_ELEMS) < ub, data, 0).astype(np.float32)
    np.testing.assert_array_equal(got, want)


@nki.jit
def offset_from_tensor(x, k_input):
    """``.ap(scalar_offset=<one-element SBUF tensor>)``: the row at a run-time index."""
    out = nl.ndarray((1, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    k_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=k_sb, src=k_input)
    row = nl.ndarray((1, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=row, src=x.ap([[x.shape[1], 1], [1, x.shape[1]]], scalar_offset=k_sb, indirect_dim=0))
    nisa.dma_copy(dst=out, src=row)
    return out


def test_ap_scalar_offset_from_a_tensor_and_in_timing_mode():
    x = np.arange(8 * 6, dtype=np.float32).reshape(8, 6)
    np.testing.assert_array_equal(offset_from_tensor(x, np.array([[3]], np.int32)), x[3:4])
    timed = run_kernel(offset_from_tensor, (x, np.array([[3]], np.int32)), mode="timing")
    assert timed.outputs is None and len(timed.trace.instrs) == 3


def _loop_body_kernel(failing_body, loop: str):
    """A kernel whose one dynamic loop (``loop``: dynamic_range or fori_loop) runs ``failing_body(t)``."""
    @nki.jit
    def k(x):
        out = nl.ndarray((4, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((4, 4), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        if loop == "dynamic_range":
            for _ in nl.dynamic_range(2):
                failing_body(t)
        else:
            nl.fori_loop(0, 2, lambda i: failing_body(t))
        nisa.dma_copy(dst=out, src=t)
        return out
    return k


def _python_error(t):
    raise ZeroDivisionError("the body's own Python error")


def _rule_error(t):
    wide = nl.ndarray((4, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=t, data1=t, data2=wide, op=nl.add)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("loop", ["dynamic_range", "fori_loop"])
@pytest.mark.parametrize("mode", ["full", "timing"])
def test_an_error_raised_by_a_loop_body_is_the_error_reported(loop, mode):
    """The body's own error (its Python's, or a rule its instruction breaks while it is recorded) is what the kernel's
    author sees: a dynamic_range body left by an exception was reported as "the loop body must run to its end (no
    break or return)", which hid the error and its line."""
    x = np.ones((4, 4), np.float32)
    with pytest.raises(ZeroDivisionError, match="the body's own Python error"):
        run_kernel(_loop_body_kernel(_python_error, loop), (x,), mode=mode)
    with pytest.raises(NKIError, match=r"tensor_tensor: operand shapes \[\[4, 4\], \[4, 8\]\]") as err:
        run_kernel(_loop_body_kernel(_rule_error, loop), (x,), mode=mode)
    assert err.value.code == "nkisim_shape_mismatch"


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_break_out_of_a_dynamic_range_body_is_still_refused():
    @nki.jit
    def k(x):
        out = nl.ndarray((4, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((4, 4), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        for _ in nl.dynamic_range(2):
            nisa.tensor_tensor(dst=t, data1=t, data2=t, op=nl.add)
            break
        nisa.dma_copy(dst=out, src=t)
        return out

    with pytest.raises(NKIError, match="must run to its end"):
        run_kernel(k, (np.ones((4, 4), np.float32),))


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("loop", ["dynamic_range", "fori_loop"])
def test_a_loop_body_failing_on_its_values_names_the_instruction_and_the_error_not_the_values(loop, monkeypatch):
    """An error of the values a loop body computes (here a FloatingPointError on an operand over 0.99, as in
    test_nkisim_device_values' S10 test) is a fault naming the instruction and the error's type, in the words of the
    same error outside a loop; it reached the kernel's author as the raw exception, whose text may carry a value
    computed on the device (docs/grading-security.md: error texts reveal no device values)."""
    from nkisim.core.ops import tensor_engine

    real = tensor_engine._matrix  # a matmul operand's values, as multiplied

    def fragile(raw, dtype_name, k, n, slot, view=None):
        v = real(raw, dtype_name, k, n, slot, view)
        if (v > 0.99).any():
            raise FloatingPointError(f"value {float(v.max())!r} too large")
        return v

    monkeypatch.setattr(tensor_engine, "_matrix", fragile)

    def matmul(s):
        ps = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=ps, stationary=s, moving=s)
        nisa.tensor_copy(dst=s, src=ps)

    @nki.jit
    def k(s_in):
        s = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=s, src=s_in)
        if loop == "dynamic_range":
            for _ in nl.dynamic_range(2):
                matmul(s)
        else:
            nl.fori_loop(0, 2, lambda i: matmul(s))
        out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=s)
        return out

    small = np.full((128, 128), 1e-3, np.float32)
    run_kernel(k, (small,))
    big = small.copy()
    big[5, 5] = 1.5
    with pytest.raises(DeviceFault, match="nc_matmul: FloatingPointError while the device program computed its "
                       "values") as err:
        run_kernel(k, (big,))
    assert "1.5" not in str(err.value) and err.value.__cause__ is None and err.value.__context__ is None
