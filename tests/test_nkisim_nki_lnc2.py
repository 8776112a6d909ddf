"""LNC=2 launches of the current API: the two NeuronCores' programs run in lockstep (nkisim.core.lockstep), so
``nisa.sendrecv`` exchanges tiles and ``nisa.core_barrier`` orders shared-HBM accesses between them, with AWS's
constraints (aws-neuron-sdk nki/api/nki/isa/__init__.py, NKI 0.6) and costs in which the two cores' timelines meet.
Values are checked against NumPy; wrong pairings are errors naming both places, never a hang."""

from __future__ import annotations

import warnings

import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from nkisim_util import raises_rule

from nkisim.core.runtime import run_kernel
from nkisim.perf import costs_for, estimate
from nkisim.perf.model import CostModel
from nkisim.perf.scheduler import GapResource

RNG = np.random.default_rng(3202)


def _rows(x, pid, rows):
    return x[pid * rows:(pid + 1) * rows, :]


# ---- sendrecv: values ------------------------------------------------------------------------------------------
@nki.jit
def exchange_add(x):
    """Each core loads its half of x, receives the other core's half and stores the sum of both in its rows."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    pid = nl.program_id(0)
    rows = x.shape[0] // nl.num_programs(0)
    mine = nl.ndarray((rows, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    theirs = nl.ndarray((rows, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=mine, src=_rows(x, pid, rows))
    nisa.sendrecv(src=mine, dst=theirs, send_to_rank=1 - pid, recv_from_rank=1 - pid, pipe_id=0)
    nisa.tensor_tensor(dst=theirs, data1=theirs, data2=mine, op=nl.subtract)  # theirs - mine: order matters
    nisa.dma_copy(dst=_rows(out, pid, rows), src=theirs)
    return out


@pytest.mark.parametrize("rows,cols", [(128, 64), (40, 7)])
def test_sendrecv_gives_each_core_the_other_cores_tile(rows, cols):
    x = RNG.standard_normal((2 * rows, cols)).astype(np.float32)
    top, bottom = x[:rows], x[rows:]
    want = np.concatenate([bottom - top, top - bottom])
    np.testing.assert_array_equal(exchange_add[2](x), want)


@nki.jit
def swap_in_place(x):
    """One tile is both src and dst: each core's tile is replaced by the other core's."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    pid = nl.program_id(0)
    rows = x.shape[0] // 2
    t = nl.ndarray((rows, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=_rows(x, pid, rows))
    nisa.sendrecv(src=t, dst=t, send_to_rank=1 - pid, recv_from_rank=1 - pid, pipe_id=3,
                  dma_engine=nisa.dma_engine.gpsimd_dma)
    nisa.dma_copy(dst=_rows(out, pid, rows), src=t)
    return out


def test_a_tile_sent_and_received_in_place_swaps():
    x = RNG.integers(-100, 100, (256, 16)).astype(np.int32)
    np.testing.assert_array_equal(swap_in_place[2](x), np.concatenate([x[128:], x[:128]]))


@nki.jit
def all_reduce_chunks(x, chunks):
    """A sum over both cores' halves, chunk by chunk: one sendrecv per chunk, then each core stores its chunks."""
    out = nl.ndarray((x.shape[0] // 2, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    pid = nl.program_id(0)
    rows = x.shape[0] // 2
    width = x.shape[1] // chunks
    for c in nl.affine_range(chunks):
        cols = slice(c * width, (c + 1) * width)
        mine = nl.ndarray((rows, width), dtype=x.dtype, buffer=nl.sbuf)
        got = nl.ndarray((rows, width), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=mine, src=x[pid * rows:(pid + 1) * rows, cols])
        nisa.sendrecv(src=mine, dst=got, send_to_rank=1 - pid, recv_from_rank=1 - pid, pipe_id=0)
        nisa.tensor_tensor(dst=got, data1=got, data2=mine, op=nl.add)
        if c % 2 == pid:  # the cores share the stores
            nisa.dma_copy(dst=out[:, cols], src=got)
    return out


def test_chunked_all_reduce_over_both_cores_matches_numpy():
    x = RNG.random((256, 96)).astype(np.float32)
    np.testing.assert_allclose(all_reduce_chunks[2](x, 6), x[:128] + x[128:], rtol=1e-6)
    run = run_kernel(all_reduce_chunks[2], (x, 6))
    assert run.trace.meta["spmd"]["syncs"] == 6
    per_core = [[i.attrs["sync"] for i in run.trace.instrs[s:e] if i.op == "sendrecv"]
                for s, e in zip(run.trace.meta["spmd"]["program_start"], (run.trace.meta["spmd"]["program_start"][1],
                                                                             len(run.trace.instrs)))]
    assert per_core == [list(range(6)), list(range(6))]


@nki.jit
def looped_exchange(x, n_in):
    """A sendrecv in a dynamic loop: the body runs once in Python, the device repeats it n times on each core."""
    out = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    pid = nl.program_id(0)
    acc = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    mine = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    got = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=mine, src=_rows(x, pid, 128))
    nisa.memset(dst=acc, value=0.0)
    n_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=n_sb, src=n_in)
    n = nisa.register_alloc()
    nisa.register_load(n, n_sb)

    def body(i):
        nisa.sendrecv(src=mine, dst=got, send_to_rank=1 - pid, recv_from_rank=1 - pid, pipe_id=0)
        nisa.tensor_tensor(dst=acc, data1=acc, data2=got, op=nl.add)
        nisa.tensor_tensor(dst=mine, data1=mine, data2=got, op=nl.add)

    nl.fori_loop(0, n, body)
    if pid == 1:
        nisa.dma_copy(dst=out, src=acc)
    return out


@pytest.mark.parametrize("n", [0, 1, 3])
def test_a_sendrecv_in_a_dynamic_loop_meets_once_per_iteration(n):
    x = RNG.random((256, 8)).astype(np.float32)
    a, b = x[:128].astype(np.float64), x[128:].astype(np.float64)
    acc1 = np.zeros_like(a)
    for _ in range(n):  # both cores add what they received to their own tile: a, b -> a + b, a + b -> ...
        acc1 += a
        a, b = a + b, b + a
    if n == 0:
        kernel_out = run_kernel(looped_exchange[2], (x, np.array([[n]], np.int32)))
        assert kernel_out.trace.meta["spmd"]["syncs"] == 0
        return
    np.testing.assert_allclose(looped_exchange[2](x, np.array([[n]], np.int32)), acc1, rtol=1e-5)
    assert run_kernel(looped_exchange[2], (x, np.array([[n]], np.int32))).trace.meta["spmd"]["syncs"] == n


# ---- core_barrier: values ----------------------------------------------------------------------------------------
def _halves_then_whole(barrier: bool):
    @nki.jit
    def kernel(x):
        """Each core writes its half of a shared scratch tensor, (barrier,) then reads the whole scratch."""
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        scratch = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        pid = nl.program_id(0)
        rows = x.shape[0] // 2
        t = nl.ndarray((rows, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=_rows(x, pid, rows))
        nisa.activation(dst=t, op=nl.exp, data=t)
        nisa.dma_copy(dst=_rows(scratch, pid, rows), src=t)
        if barrier:
            nisa.core_barrier(data=scratch, cores=(0, 1))
        other = nl.ndarray((rows, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=other, src=_rows(scratch, 1 - pid, rows))
        nisa.tensor_tensor(dst=t, data1=t, data2=other, op=nl.add)
        nisa.dma_copy(dst=_rows(out, pid, rows), src=t)
        return out

    return kernel


def test_core_barrier_makes_the_other_cores_writes_visible():
    x = RNG.standard_normal((256, 32)).astype(np.float32)
    e = np.exp(x[:128]) + np.exp(x[128:])
    np.testing.assert_allclose(_halves_then_whole(True)[2](x), np.concatenate([e, e]), rtol=1e-5)
    # without the barrier core 0 reads core 1's half before core 1 has written it (nkisim runs core 0 first until
    # it synchronises): the race the barrier exists for
    raced = _halves_then_whole(False)[2](x)
    assert not np.allclose(raced[:128], e, rtol=1e-5)
    np.testing.assert_allclose(raced[128:], e, rtol=1e-5)


@nki.jit
def created_by_core1_first(x):
    """Core 1 creates (and fills) the second shared tensor before the barrier, core 0 only after it: both name one
    tensor, whichever core got there first."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    pid = nl.program_id(0)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    if pid == 1:
        box = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=t, src=x)
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=3.0)
        nisa.dma_copy(dst=box, src=t)
    nisa.core_barrier(data=out, cores=[0, 1])
    if pid == 0:
        box = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=t, src=box)
        nisa.dma_copy(dst=out, src=t)
    return out


def test_a_shared_tensor_first_created_by_core_1_is_the_one_core_0_gets():
    x = RNG.random((64, 8)).astype(np.float32)
    np.testing.assert_allclose(created_by_core1_first[2](x), 3 * x, rtol=1e-6)


CALLS: list = []


@nki.jit
def counted(x):
    CALLS.append(nl.program_id(0))
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.reciprocal(dst=t, data=t)  # 1/0 = inf: NumPy's divide warning must stay off in the cores' threads
    nisa.core_barrier(data=x, cores=(0, 1), engine=nisa.engine.vector)
    if nl.program_id(0) == 0:
        nisa.dma_copy(dst=out, src=t)
    else:
        nisa.dma_copy(dst=out, src=t)
    return out


def test_the_kernels_python_runs_once_per_core_and_numpy_stays_quiet():
    x = np.array([[0.0, 2.0, -4.0, 0.5]], np.float32)
    CALLS.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = counted[2](x)
    assert CALLS == [0, 1]
    np.testing.assert_array_equal(got, np.array([[np.inf, 0.5, -0.25, 2.0]], np.float32))


# ---- wrong usage: errors naming the problem, never a hang --------------------------------------------------------
def _usage(mode: str):
    @nki.jit
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        pid = nl.program_id(0)
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        r = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        if mode == "one-sided barrier" and pid == 0:
            nisa.core_barrier(data=out, cores=(0, 1))
        elif mode == "one-sided sendrecv" and pid == 1:
            nisa.sendrecv(src=t, dst=r, send_to_rank=0, recv_from_rank=0, pipe_id=0)
        elif mode == "barrier meets sendrecv":
            if pid == 0:
                nisa.core_barrier(data=out, cores=(0, 1))
            else:
                nisa.sendrecv(src=t, dst=r, send_to_rank=0, recv_from_rank=0, pipe_id=0)
        elif mode == "pipe ids differ":
            nisa.sendrecv(src=t, dst=r, send_to_rank=1 - pid, recv_from_rank=1 - pid, pipe_id=pid)
        elif mode == "shapes differ":
            s = nl.ndarray((x.shape[0], 2 + 2 * pid), dtype=x.dtype, buffer=nl.sbuf)
            nisa.memset(dst=s, value=1.0)
            nisa.sendrecv(src=s, dst=s, send_to_rank=1 - pid, recv_from_rank=1 - pid, pipe_id=0)
        elif mode == "python error on core 1":
            if pid == 1:
                raise KeyError("a bug in core 1's branch")
            nisa.core_barrier(data=out, cores=(0, 1))
        elif mode == "python error on core 0":
            if pid == 0:
                raise KeyError("a bug in core 0's branch")
            nisa.core_barrier(data=out, cores=(0, 1))
        nisa.dma_copy(dst=out, src=t)
        return out

    return kernel


X = np.ones((16, 4), np.float32)


@pytest.mark.parametrize("mode,fragments", [
    ("one-sided barrier", ("core 0 reached nisa.core_barrier at test_nkisim_nki_lnc2.py:",
                           "core 1 returned from the kernel without reaching a matching nisa.core_barrier")),
    ("one-sided sendrecv", ("core 1 reached nisa.sendrecv", "core 0 returned from the kernel")),
    ("barrier meets sendrecv", ("core 0 waits at nisa.core_barrier (test_nkisim_nki_lnc2.py:",
                                "core 1 reached nisa.sendrecv(pipe_id=0)", "pair up in program order")),
    ("pipe ids differ", ("nisa.sendrecv(pipe_id=0)", "nisa.sendrecv(pipe_id=1)")),
    ("shapes differ", ("core 0 sends a [16, 2] float32 tile", "core 1's dst [16, 4] float32",
                       "same shape and data type")),
])
def test_synchronisations_that_do_not_pair_up_are_errors_naming_both_places(mode, fragments):
    with raises_rule("nkisim_lnc_lockstep", *fragments):
        _usage(mode)[2](X)


@pytest.mark.parametrize("core", [0, 1])
def test_a_python_error_on_one_core_is_raised_while_the_other_waits(core):
    with pytest.raises(KeyError, match=f"core {core}'s branch"):
        _usage(f"python error on core {core}")[2](X)


@nki.jit
def faulting_core0(x, k_in):
    """Core 0's DMA reads at a run-time row outside x (a device fault), then both cores meet at a barrier."""
    out = nl.ndarray((1, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    row = nl.ndarray((1, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    if nl.program_id(0) == 0:
        k_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=k_sb, src=k_in)
        r = nisa.register_alloc()
        nisa.register_load(r, k_sb)
        nisa.dma_copy(dst=row, src=x.ap([[x.shape[1], 1], [1, x.shape[1]]], scalar_offset=r, indirect_dim=0))
    else:
        nisa.dma_copy(dst=row, src=x[0:1, :])
    nisa.core_barrier(data=out, cores=(0, 1))
    nisa.dma_copy(dst=out, src=row)
    return out


def test_a_device_fault_on_one_core_is_the_error_not_the_barrier_it_then_misses():
    x = np.arange(8 * 6, dtype=np.float32).reshape(8, 6)
    np.testing.assert_array_equal(faulting_core0[2](x, np.array([[0]], np.int32)), x[0:1])
    with pytest.raises(IndexError, match="outside its tensor"):
        faulting_core0[2](x, np.array([[9]], np.int32))


def _bad_call(what: str):
    @nki.jit
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        pid = nl.program_id(0)
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        peer = 1 - pid
        if what == "src in hbm":
            nisa.sendrecv(src=x, dst=t, send_to_rank=peer, recv_from_rank=peer, pipe_id=0)
        elif what == "dst in psum":
            p = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.psum)
            nisa.sendrecv(src=t, dst=p, send_to_rank=peer, recv_from_rank=peer, pipe_id=0)
        elif what == "dtypes differ":
            h = nl.ndarray(x.shape, dtype=nl.float16, buffer=nl.sbuf)
            nisa.sendrecv(src=t, dst=h, send_to_rank=peer, recv_from_rank=peer, pipe_id=0)
        elif what == "shapes differ":
            h = nl.ndarray((x.shape[0], 2), dtype=x.dtype, buffer=nl.sbuf)
            nisa.sendrecv(src=t, dst=h, send_to_rank=peer, recv_from_rank=peer, pipe_id=0)
        elif what == "send to itself":
            nisa.sendrecv(src=t, dst=t, send_to_rank=pid, recv_from_rank=peer, pipe_id=0)
        elif what == "rank 2":
            nisa.sendrecv(src=t, dst=t, send_to_rank=2, recv_from_rank=peer, pipe_id=0)
        elif what == "gpsimd_dma too wide":
            w = nl.ndarray((x.shape[0], 300), dtype=nl.float32, buffer=nl.sbuf)
            nisa.sendrecv(src=w, dst=w, send_to_rank=peer, recv_from_rank=peer, pipe_id=0,
                          dma_engine=nisa.dma_engine.gpsimd_dma)
        elif what == "barrier on psum":
            p = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.psum)
            nisa.core_barrier(data=p, cores=(0, 1))
        elif what == "barrier of core 0 only":
            nisa.core_barrier(data=out, cores=(0,))
        elif what == "barrier on the dma queues":
            nisa.core_barrier(data=out, cores=(0, 1), engine=nisa.engine.dma)
        nisa.dma_copy(dst=out, src=t)
        return out

    return kernel


@pytest.mark.parametrize("what,code,fragments", [
    ("src in hbm", "err_unsupported_memory", ("src", "sendrecv", "sbuf")),
    ("dst in psum", "err_unsupported_memory", ("dst", "sendrecv", "psum")),
    ("dtypes differ", "nkisim_bad_argument", ("src (float32) and dst (float16) must have the same data type",)),
    ("shapes differ", "nkisim_bad_argument", ("src [16, 4] and dst [16, 2] must have the same shape",)),
    ("send to itself", "nkisim_bad_argument", ("send_to_rank=0 is the running core",)),
    ("rank 2", "nkisim_bad_argument", ("send_to_rank=2", "0 and 1")),
    ("gpsimd_dma too wide", "nkisim_bad_argument", ("at most 1024 bytes per partition", "has 1200")),
    ("barrier on psum", "nkisim_bad_argument", ("must be data in shared HBM", "not psum")),
    ("barrier of core 0 only", "nkisim_bad_argument", ("cores=(0,)", "only cores=(0, 1) is supported")),
    ("barrier on the dma queues", "nkisim_bad_argument", ("compute engine",)),
])
def test_documented_constraints_are_checked(what, code, fragments):
    with raises_rule(code, *fragments):
        _bad_call(what)[2](X)


@pytest.mark.parametrize("op", ["sendrecv", "core_barrier"])
def test_cross_core_instructions_need_an_lnc2_launch_on_trn2(op):
    kernel = _usage("one-sided barrier" if op == "core_barrier" else "pipe ids differ")
    with raises_rule("nkisim_bad_argument", op, "LNC (Logical NeuronCore) is enabled", "kernel[2]"):
        run_kernel(kernel, (X,))  # LNC=1: program 0 only, at its call
    if op == "sendrecv":
        with raises_rule("nkisim_bad_argument", "NeuronCore-v3 or newer (trn2)"):
            run_kernel(kernel[2], (X,), target="trn1")


@nki.jit
def barrier_on_a_counter(x):
    """nki-library's forms (MoE CTE shard-on-I): a barrier on an SBUF tile, and at LNC=1 a barrier of core 0 alone
    written ``cores=(0)``, the integer."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=1.0)
    if nl.num_programs() == 2:
        nisa.core_barrier(t, (0, 1))
    else:
        nisa.core_barrier(t, (0))
    nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_a_barrier_on_an_sbuf_tile_and_a_one_core_barrier_at_lnc1_run_as_nki_library_uses_them():
    x = RNG.random((16, 4)).astype(np.float32)
    np.testing.assert_allclose(barrier_on_a_counter[2](x), 2 * (x + 1), rtol=1e-6)
    np.testing.assert_allclose(barrier_on_a_counter(x), 2 * (x + 1), rtol=1e-6)
    run = run_kernel(barrier_on_a_counter, (x,), mode="timing")
    estimate(run.trace)
    barrier = _op(run.trace.instrs, "core_barrier")
    # one core: no operand (it reads nothing a graded kernel's HBM traffic could count), no meeting, MIN_II
    assert barrier.srcs == () and barrier.dsts == () and "sync" not in barrier.attrs
    assert barrier.end_ns - barrier.start_ns < 100.0
    after = _op(run_kernel(barrier_on_a_counter[2], (x,), mode="timing").trace.instrs, "core_barrier")
    assert after.srcs[0].region.buf.name == "SBUF" and after.attrs["sync"] == 0


# ---- costs: the cores' timelines meet ---------------------------------------------------------------------------
@nki.jit
def lopsided(x, barrier_engine):
    """Core 0 works long before the barrier, core 1 hardly at all; after it core 1 runs an independent GpSimd
    instruction (no data dependency on anything before) and reads the shared tensor."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    pid = nl.program_id(0)
    rows = x.shape[0] // 2
    t = nl.ndarray((rows, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=_rows(x, pid, rows))
    if pid == 0:
        for _ in range(24):
            nisa.activation(dst=t, op=nl.exp, data=t, scale=0.001)
    nisa.dma_copy(dst=_rows(out, pid, rows), src=t)
    nisa.core_barrier(data=out, cores=(0, 1), engine=barrier_engine)
    late = nl.ndarray((rows, 4), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=late, value=0.0, engine=nisa.engine.gpsimd)
    back = nl.ndarray((rows, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=back, src=_rows(out, 1 - pid, rows))
    nisa.dma_copy(dst=_rows(x, pid, rows), src=back)
    return out


def _cores(run):
    starts = run.trace.meta["spmd"]["program_start"]
    return run.trace.instrs[starts[0]:starts[1]], run.trace.instrs[starts[1]:]


def _op(instrs, op, k=0):
    return [i for i in instrs if i.op == op][k]


def test_a_barrier_holds_the_faster_core_until_the_slower_arrives():
    x = RNG.random((256, 512)).astype(np.float32)
    run = run_kernel(lopsided[2], (x.copy(), nisa.engine.gpsimd), mode="timing")
    rep = estimate(run.trace)
    c0, c1 = _cores(run)
    b0, b1 = _op(c0, "core_barrier"), _op(c1, "core_barrier")
    ready0 = _op(c0, "dma_copy", 1).end_ns  # core 0's store of its half, after 24 activations
    assert b0.start_ns == b1.start_ns >= ready0
    assert b0.end_ns == b1.end_ns > b0.start_ns
    # after the barrier, core 1's GpSimd is blocked until the barrier completes, although the memset depends on
    # nothing; its read of the shared tensor (the barrier's data) waits too
    assert _op(c1, "memset").start_ns >= b1.end_ns
    assert _op(c1, "dma_copy", 2).start_ns >= b1.end_ns
    lat0, lat1 = rep.core_latency_us
    assert lat1 == pytest.approx(lat0, rel=0.02)
    # without the wait core 1 would be done long before core 0 got to its barrier
    assert ready0 / 1000 > 0.5 * lat0 - 12.0


def test_the_barrier_cost_is_a_guess_of_one_remote_semaphore_round_trip():
    x = RNG.random((256, 512)).astype(np.float32)
    run = run_kernel(lopsided[2], (x.copy(), nisa.engine.vector), mode="timing")
    estimate(run.trace)
    b = _op(_cores(run)[0], "core_barrier")
    # MIN_II on the engine + the semaphore round trip (a guess: DMA fixed latencies, trn2 500 + 350 ns)
    assert 850.0 < b.end_ns - b.start_ns < 1000.0
    assert b.engine.name == "VECTOR"


@nki.jit
def lopsided_exchange(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    pid = nl.program_id(0)
    rows = x.shape[0] // 2
    t = nl.ndarray((rows, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    r = nl.ndarray((rows, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=_rows(x, pid, rows))
    for _ in range(12 * (1 - pid)):
        nisa.activation(dst=t, op=nl.exp, data=t, scale=0.001)
    nisa.sendrecv(src=t, dst=r, send_to_rank=1 - pid, recv_from_rank=1 - pid, pipe_id=0)
    nisa.dma_copy(dst=_rows(out, pid, rows), src=r)
    return out


def test_a_sendrecv_starts_when_both_cores_have_arrived_and_ends_together():
    x = RNG.random((256, 256)).astype(np.float32)
    full = run_kernel(lopsided_exchange[2], (x,))
    timing = run_kernel(lopsided_exchange[2], (x,), mode="timing")
    assert [(i.op, i.attrs.get("sync")) for i in full.trace.instrs] == \
        [(i.op, i.attrs.get("sync")) for i in timing.trace.instrs]
    assert estimate(full.trace).total_us == estimate(timing.trace).total_us
    c0, c1 = _cores(timing)
    s0, s1 = _op(c0, "sendrecv"), _op(c1, "sendrecv")
    # the CoreBarrier hand-off (a guess: one DMA's fixed latencies, 850 ns on trn2), then the transfer
    sync = CostModel(costs_for("trn2")).core_sync_ns()
    assert sync == 850.0
    assert s0.start_ns == s1.start_ns >= _op(c0, "activation", 11).end_ns + sync
    assert s0.end_ns == s1.end_ns
    assert _op(c1, "dma_copy", 1).start_ns >= s1.end_ns  # core 1 stores what core 0 sent, after it arrived


def test_a_trace_whose_cores_do_not_pair_up_is_refused_by_the_model():
    run = run_kernel(lopsided_exchange[2], (RNG.random((256, 16)).astype(np.float32),), mode="timing")
    core1 = _cores(run)[1]
    ins = _op(core1, "sendrecv")
    ins.attrs = {k: v for k, v in ins.attrs.items() if k != "sync"}
    with pytest.raises(ValueError, match="do not pair up"):
        estimate(run.trace)


def test_an_lnc2_launch_is_not_recorded_as_one_instruction_stream():
    from nkisim import stream

    with pytest.raises(stream.NotRecordable, match="LNC=2"):
        stream.record(exchange_add[2], (RNG.random((256, 8)).astype(np.float32),))


SEEN: list = []


@nki.jit
def uneven_loops(x, counts):
    """Each core repeats a sendrecv counts[pid] times (a device value), then meets the other at a barrier; the
    kernel's Python watches for errors around both."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    pid = nl.program_id(0)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    r = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    n_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=n_sb, src=counts[pid:pid + 1, :])
    n = nisa.register_alloc()
    nisa.register_load(n, n_sb)

    def body(i):
        nisa.sendrecv(src=t, dst=r, send_to_rank=1 - pid, recv_from_rank=1 - pid, pipe_id=0)

    try:
        nl.fori_loop(0, n, body)
        nisa.core_barrier(data=out, cores=(0, 1))
    except Exception as exc:  # noqa: BLE001 - what the kernel could learn
        SEEN.append(type(exc).__name__)
    SEEN.append(pid)
    nisa.dma_copy(dst=out, src=r)
    return out


def test_unequal_device_loop_counts_fail_after_the_kernel_returns_and_python_sees_nothing():
    x = RNG.random((8, 4)).astype(np.float32)
    SEEN.clear()
    np.testing.assert_array_equal(uneven_loops[2](x, np.array([[3], [3]], np.int32)), x)
    SEEN.clear()
    with raises_rule("nkisim_lnc_lockstep", "core 0 waits at nisa.core_barrier", "core 1 reached nisa.sendrecv"):
        uneven_loops[2](x, np.array([[2], [3]], np.int32))
    assert sorted(SEEN) == [0, 1]  # both programs ran to their end; neither caught anything


class _Interrupted(Exception):
    pass


@nki.jit
def interrupted_while_core1_runs(x):
    """Core 1 signals the launching thread (as Ctrl-C or a test timeout would) and keeps issuing instructions."""
    import os
    import signal

    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    if nl.program_id(0) == 1:
        os.kill(os.getpid(), signal.SIGUSR1)
        for _ in range(100000):
            nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=1.0)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_an_interrupted_launch_leaves_no_core_running():
    import signal
    import threading

    from nkisim.core import context

    def handler(signum, frame):
        raise _Interrupted

    old = signal.signal(signal.SIGUSR1, handler)
    try:
        with pytest.raises(_Interrupted):
            interrupted_while_core1_runs[2](np.zeros((4, 4), np.float32))
    finally:
        signal.signal(signal.SIGUSR1, old)
    assert not [t for t in threading.enumerate() if t.name.startswith("nkisim-core")]
    assert context._STACK == []
    np.testing.assert_array_equal(exchange_add[2](np.ones((4, 2), np.float32)), np.zeros((4, 2), np.float32))


@nki.jit
def old_spelling(x):
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.sendrecv(src=t, dst=t, send_to_rank=1, recv_from_rank=1, pipe_id=0, use_gpsimd_dma=True)
    return x


def test_the_removed_use_gpsimd_dma_flag_names_its_replacement():
    with pytest.raises(TypeError, match="dma_engine=nisa.dma_engine.gpsimd_dma"):
        old_spelling[2](X)


# ---- the engine a barrier blocks --------------------------------------------------------------------------------
@given(st.lists(st.tuples(st.floats(0, 1000), st.floats(0.5, 50)), max_size=12), st.floats(0, 1200),
       st.floats(0, 1200), st.floats(0.1, 80))
def test_a_closed_stretch_takes_no_request_and_later_gaps_stay(busy, t, ask, d):
    """GapResource.close_before(t): no request starts before t any more (the engine waits at a barrier until t);
    placements that start at or after t are where they were."""
    gr, ref = GapResource(), GapResource()
    for s, dur in busy:
        for g in (gr, ref):
            start, pos = g.find(s, dur)
            g.insert(start, dur, pos, 0)
    gr.close_before(t, 1)
    start, _ = gr.find(ask, d)
    assert start >= t - 1e-9
    before, _ = ref.find(max(ask, t), d)
    assert start == pytest.approx(before)
