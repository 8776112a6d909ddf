"""Red team of the product sharing of lockstep groups (nkisim/core/sharing.py; docs/grading-security.md, "Correctness
calls replayed together"): every way a kernel writes values into a matmul operand's storage, made member-specific
between two matmuls of the same tiles.

The grader's grouped calls (``part2.large``, ``bias``, ``maxpool``) multiply the same X and W; the bias (and, through
registers and dynamic loops, the control flow) is the one thing that differs.  A product is reused only for operands
of the same bits -- since the equality memo, "the same bits" may be established from storage versions
(``Allocation.gen``) instead of a compare, so a write path that does not bump the version would hand a member the
product of operands it no longer holds: a kernel wrong alone (it garbles an operand with the bias) could pass
``part2.bias`` on ``part2.large``'s products.  Each kernel below makes one product all members share (the same a and
b), then writes its own input c into an operand through one write path and multiplies again: every member must get,
bit for bit, what it gets replayed alone, with the memo's self-check on (it compares whenever the memo answers)."""

from __future__ import annotations

import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest

from nkisim import stream
from nkisim.core import sharing

F32 = nl.float32


def _dma(m, s, cs, c):
    nisa.dma_copy(dst=m, src=c)


def _dma_view_of_view(m, s, cs, c):
    nisa.dma_copy(dst=m[0:64, :][:, 128:384], src=c[0:64, 0:256])


def _tensor_copy(m, s, cs, c):
    nisa.tensor_copy(dst=m, src=cs)


def _tensor_copy_reshaped(m, s, cs, c):
    nisa.tensor_copy(dst=m.reshape((128, 2, 256)), src=cs.reshape((128, 2, 256)))


def _tensor_tensor(m, s, cs, c):
    nisa.tensor_tensor(dst=m, data1=m, data2=cs, op=nl.add)


def _tensor_scalar(m, s, cs, c):
    nisa.tensor_scalar(dst=m[:, 0:256], data=cs[:, 256:512], op0=nl.multiply, operand0=2.0)


def _activation(m, s, cs, c):
    nisa.activation(dst=m, op=nl.copy, data=cs)


def _activation_accumulator(m, s, cs, c):
    """The reduction result of an activation lands in the stationary (a second destination of one instruction)."""
    t = nl.ndarray((128, 512), dtype=F32, buffer=nl.sbuf)
    nisa.activation_reduce(dst=t, op=nl.copy, data=cs, reduce_op=nl.add, reduce_res=s[:, 5:6])


def _stationary_dma(m, s, cs, c):
    nisa.dma_copy(dst=s[:, 0:64], src=c[:, 0:64])


def _predicated(m, s, cs, c):
    pred = nl.ndarray((128, 512), dtype=nl.uint8, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=pred, data=cs, op0=nl.greater, operand0=0.5)
    nisa.tensor_copy_predicated(dst=m, src=cs, predicate=pred)


def _memset(m, s, cs, c):
    """The same for every member: a version the memo must not take for the one before it."""
    nisa.memset(dst=m[0:32, 0:64], value=3.0)


def _register_store(m, s, cs, c):
    big = nl.ndarray((1, 1), dtype=F32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=big, data=cs[0:1, 0:1], op0=nl.multiply, operand0=1000.0)
    r = nisa.register_alloc()
    nisa.register_load(r, big)
    nisa.register_store(m[0:1, 7:8], r)


def _dynamic_loop(m, s, cs, c):
    """A member-specific trip count: the body writes the operand as often as the member's own input says."""
    big = nl.ndarray((1, 1), dtype=F32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=big, data=cs[0:1, 0:1], op0=nl.multiply, operand0=4.0)
    r = nisa.register_alloc()
    nisa.register_load(r, big)
    for _ in nl.dynamic_range(r):
        nisa.tensor_scalar(dst=m, data=m, op0=nl.add, operand0=1.0)


def _indirect_gather(m, s, cs, c):
    f = nl.ndarray((128, 1), dtype=F32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=f, data=cs[:, 0:1], op0=nl.multiply, operand0=127.0)
    idx = nl.ndarray((128, 1), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=idx, src=f)
    nisa.dma_copy(dst=m, src=c.ap(pattern=[[512, 128], [1, 512]], vector_offset=idx, indirect_dim=0))


def _dma_compute(m, s, cs, c):
    nisa.dma_compute(dst=m, srcs=[m, c], reduce_op=nl.add)


def _psum_accumulation(m, s, cs, c):
    """The member's input accumulated into a PSUM tile by a matmul, evicted into the operand."""
    p = nl.ndarray((128, 512), dtype=F32, buffer=nl.psum)
    nisa.nc_matmul(dst=p, stationary=s, moving=cs)
    nisa.nc_matmul(dst=p, stationary=s, moving=cs, accumulate=True)
    nisa.tensor_copy(dst=m, src=p)


def _bitcast_alias(m, s, cs, c):
    """A write through a view of the operand's storage as another dtype (one allocation, two dtypes)."""
    nisa.tensor_copy(dst=m.view(nl.int32)[:, 0:128], src=cs.view(nl.int32)[:, 0:128])


def _hbm_roundtrip(m, s, cs, c):
    """The member's data stored to an HBM scratch tensor and loaded back into the operand."""
    h = nl.ndarray((128, 512), dtype=F32, buffer=nl.hbm)
    nisa.dma_copy(dst=h, src=cs)
    nisa.dma_copy(dst=m, src=h)


def _rng_seeded(m, s, cs, c):
    """Random bits from a generator seeded with the member's data, written into the operand's storage."""
    seed = nl.ndarray((1, 1), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=seed, src=cs.view(nl.uint32)[0:1, 0:1])
    nisa.set_rng_seed(seed)
    nisa.rng(dst=m.view(nl.uint32)[:, 0:64])


WRITES = [_dma, _dma_view_of_view, _tensor_copy, _tensor_copy_reshaped, _tensor_tensor, _tensor_scalar, _activation,
          _activation_accumulator, _stationary_dma, _predicated, _memset, _register_store, _dynamic_loop,
          _indirect_gather, _dma_compute, _psum_accumulation, _bitcast_alias, _hbm_roundtrip, _rng_seeded]


def _kernel(write):
    @nki.jit
    def kernel(a, b, c):
        out = nl.ndarray((128, 512), dtype=F32, buffer=nl.shared_hbm)
        s = nl.ndarray((128, 128), dtype=F32, buffer=nl.sbuf)
        nisa.dma_copy(dst=s, src=a)
        m = nl.ndarray((128, 512), dtype=F32, buffer=nl.sbuf)
        nisa.dma_copy(dst=m, src=b)
        cs = nl.ndarray((128, 512), dtype=F32, buffer=nl.sbuf)
        nisa.dma_copy(dst=cs, src=c)
        p1 = nl.ndarray((128, 512), dtype=F32, buffer=nl.psum)
        nisa.nc_matmul(dst=p1, stationary=s, moving=m)  # the product every member shares (the same a and b)
        write(m, s, cs, c)  # the member's own c into an operand
        p2 = nl.ndarray((128, 512), dtype=F32, buffer=nl.psum)
        nisa.nc_matmul(dst=p2, stationary=s, moving=m)
        r = nl.ndarray((128, 512), dtype=F32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=r, src=p2)
        nisa.dma_copy(dst=out, src=r)
        return out

    return kernel


def _members(kernel, n: int = 3):
    rng = np.random.default_rng(11)
    a = rng.random((128, 128), dtype=np.float32)
    b = rng.random((128, 512), dtype=np.float32)
    # the first member's c is b itself: its write leaves the operand as it was
    cs = [b.copy()] + [rng.random((128, 512), dtype=np.float32) for _ in range(n - 1)]
    members = []
    for c in cs:
        args = [a, b, c]
        data, _ = stream.record(kernel, args, {})
        members.append((stream.loads(stream.dumps(data)), args, {}))
    return members


def _bits(x: np.ndarray) -> np.ndarray:
    return x.view(np.uint8)


@pytest.mark.parametrize("write", WRITES, ids=[w.__name__.strip("_") for w in WRITES])
def test_a_member_specific_write_between_two_products_is_never_shared_over(write, monkeypatch):
    monkeypatch.setattr(sharing, "SELF_CHECK", True, raising=False)
    members = _members(_kernel(write))
    alone = [stream.replay(s, [x.copy() for x in args], dict(kw)) for s, args, kw in members]
    grouped, figures = stream.replay_group(members)
    for k, (al, gr) in enumerate(zip(alone, grouped, strict=True)):
        assert not isinstance(al, BaseException), al
        assert not isinstance(gr, BaseException), (k, gr)
        assert np.array_equal(_bits(gr.outputs), _bits(al.outputs)), f"member {k} got another member's product"
    assert figures["hits"] >= len(members) - 1  # the first product was shared: the sharing was on
    if write is not _memset:  # the members' own writes made their second products differ (else it proves nothing)
        assert not np.array_equal(alone[1].outputs, alone[2].outputs)


def test_a_member_is_charged_the_products_it_reuses():
    """What a member's reused products cost the member that computed them is part of its time alone
    (``ShareGroup.borrowed``, read by the grader's per-call time guard, docs/grading-security.md L9): a member whose
    every product is reused spends almost nothing of its own, yet alone it computes them all."""
    import time

    spent: list[float] = []

    def compute(mv: np.ndarray, keep: bool) -> np.ndarray:
        t0 = time.thread_time()
        while time.thread_time() - t0 < 0.01:  # 10 ms of CPU per product
            pass
        spent.append(time.thread_time() - t0)
        return mv * 2.0

    group = sharing.ShareGroup(3)
    st = np.ones((4, 4), np.float32)
    mv = np.ones((4, 8), np.float32)

    def member(k: int) -> None:
        m = sharing.Member(group, k)
        for _ in range(10):
            m.product(st, mv, ("float32", "float32", 4, 4, 8), compute)

    _, errors = group.run([lambda k=k: member(k) for k in range(3)])
    assert errors == [None, None, None]
    assert group.misses == 10 and group.hits == 20 and len(spent) == 10  # member 0 computed them, 1 and 2 reused
    assert group.borrowed[0] == 0.0
    assert group.borrowed[1] >= sum(spent) and group.borrowed[2] >= sum(spent)
    assert group.cpu_seconds[1] < sum(spent)  # its own thread: a lookup per product


@pytest.mark.parametrize("write", WRITES, ids=[w.__name__.strip("_") for w in WRITES])
def test_every_write_gives_the_storage_a_new_version(write, monkeypatch):
    """The invariant the equality memo rests on, checked directly on one run: before each instruction, every live
    automatically allocated on-chip tile whose bytes changed since the last instruction has a new ``gen``."""
    from nkisim.core import context, memory
    from nkisim.core.runtime import run_kernel

    live: list = []
    seen: dict = {}
    stale: list = []
    init, emit = memory.Allocation.__init__, context.KernelContext.emit

    def tracked_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        live.append(self)

    def checked_emit(self, op, *args, **kwargs):
        if self.full:
            for a in live:
                if a.tracker is None or a.placed is not None or not a.base.flags.writeable:
                    continue
                b = a.base.view(np.uint8)
                prev = seen.get(id(a))
                if prev is not None and prev[0] == a.gen and not np.array_equal(prev[1], b):
                    stale.append((op, a.name))
                seen[id(a)] = (a.gen, b.copy())
        return emit(self, op, *args, **kwargs)

    monkeypatch.setattr(memory.Allocation, "__init__", tracked_init)
    monkeypatch.setattr(context.KernelContext, "emit", checked_emit)
    rng = np.random.default_rng(5)
    args = (rng.random((128, 128), dtype=np.float32), rng.random((128, 512), dtype=np.float32),
            rng.random((128, 512), dtype=np.float32))
    run_kernel(_kernel(write), args, {}, target="trn2")
    assert len(live) > 3 and not stale, stale
