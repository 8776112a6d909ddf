"""What the lockstep group's checks cost is measured without a thread-clock read per product (core.sharing, "What
the checks cost is measured without a system call per product"): a check's compares, snapshots and copies are timed
on the thread clock where they are made, its bookkeeping on the wall clock (at most LIGHT_CLAMP a check); the
products' own cost (``borrowed``, the time guard's charge) is read around each product on the thread clock."""

from __future__ import annotations

import numpy as np
from nkisim_util import load_repo_module

from nkisim import stream
from nkisim.core import sharing
from nkisim.core.sharing import ShareGroup

CONV = load_repo_module("grader/reference/part2/conv2d.py", "share_clock_conv")


class _Clock:
    """A clock that advances ``step`` seconds per read: an interval between two reads with nothing read between
    them is ``step``."""

    def __init__(self, step: float) -> None:
        self.t = 0.0
        self.step = step
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        self.t += self.step
        return self.t


class _Alloc:
    """What the equality memo reads of an allocation: uid, gen, name."""

    def __init__(self, uid: int) -> None:
        self.uid, self.gen, self.name = uid, 0, f"tile{uid}"


def _pair(monkeypatch, wall_step: float = 1e-6):
    """A two-member group driven by hand in one thread (its window longer than the run: no hand-over), whose
    operands are whole storages ``own_storage`` names (the leader's and the follower's own, equal bits), with fake
    clocks: the thread clock one second a read, the wall clock ``wall_step``."""
    cpu, wall = _Clock(1.0), _Clock(wall_step)
    monkeypatch.setattr(sharing, "_thread_time", cpu)
    monkeypatch.setattr(sharing, "_wall", wall)
    monkeypatch.setattr(sharing, "SELF_CHECK", False)  # its compares would be counted here (NKISIM_SHARE_SELFCHECK=1)
    rng = np.random.default_rng(5)
    s = rng.random((8, 4), dtype=np.float32)
    m = rng.random((8, 6), dtype=np.float32)
    storages = {}
    for k in (0, 1):
        for name, arr in (("s", s), ("m", m)):
            storages[(k, name)] = (_Alloc(len(storages)), arr.copy(), 0)
    views = {k: ((k, "s"), (k, "m")) for k in (0, 1)}
    monkeypatch.setattr(sharing, "own_storage", lambda v: storages[v])
    group = ShareGroup(2, window=1 << 20, probe=1 << 20)
    key = ("float32", "float32", 8, 4, 6)

    def step(k: int) -> float:
        """Member ``k``'s next product; what its checks were charged."""
        before = group.check_seconds
        st, mv = storages[(k, "s")][1], storages[(k, "m")][1]
        group.product(k, st, mv, key, lambda mov, keep: st.T @ mov, views[k])
        return group.check_seconds - before

    return group, cpu, wall, storages, step


def test_a_light_check_reads_the_wall_clock_only(monkeypatch):
    """Memo hits (no compare, snapshot or copy): a reused product reads no thread clock, a computed one only its own
    cost's two reads; each check is charged its wall time."""
    group, cpu, wall, _, step = _pair(monkeypatch)
    reads, charged = [], []
    for _ in range(6):
        c0 = cpu.reads
        charged.append((step(0), step(1)))
        reads.append(cpu.reads - c0)
    assert group.hits == 6 and group.misses == 6
    # the first product: the leader's two snapshots and the follower's two storage compares (two reads each)
    assert group.snapshots == 2 and group.root_compares == 2 and group.memo_hits == 10
    assert reads == [2 + 4 + 4] + [2] * 5
    # a light check: its wall time, one tick (nothing else reads the wall clock between its two reads)
    assert np.allclose(charged[1:], 1e-6, rtol=1e-6, atol=0)
    # the time guard's charge: each product's own two thread-clock reads, one second each
    assert group.borrowed == [0.0, 6.0]


def test_a_compare_or_snapshot_is_charged_its_cpu_time_and_left_out_of_the_wall_time(monkeypatch):
    group, cpu, wall, storages, step = _pair(monkeypatch)
    slow = sharing.same_bits

    def same_bits(a, b):  # a compare that takes long on both clocks
        cpu.t += 100.0
        wall.t += 0.5
        return slow(a, b)

    monkeypatch.setattr(sharing, "same_bits", same_bits)
    step(0)
    # the follower's first check compares both storages: their CPU time (100 and the read's one, each) and its light
    # part, the wall time without theirs (five ticks and the compares' 0.5 each, less their spans: 0.5 and a tick)
    assert abs(step(1) - (2 * 101.0 + 3e-6)) < 1e-9
    step(0)
    assert abs(step(1) - 1e-6) < 1e-12  # a memo hit after: light
    # new versions of every storage (as a write makes them): a new snapshot for the leader, a new compare for the
    # follower, each timed where it is made
    for a, _, _ in storages.values():
        a.gen += 1
    c0 = cpu.reads
    lead = step(0)
    assert cpu.reads - c0 == 2 * 2 + 2 and group.snapshots == 4
    assert abs(lead - (2 * 1.0 + 3e-6)) < 1e-9
    assert abs(step(1) - (2 * 101.0 + 3e-6)) < 1e-9 and group.root_compares == 4


def test_the_self_checks_compares_are_not_charged(monkeypatch):
    """NKISIM_SHARE_SELFCHECK=1 compares every reuse again: not a cost of sharing where it runs without, so a group
    stops sharing where it would without the self-check."""
    group, cpu, wall, _, step = _pair(monkeypatch)
    step(0)
    step(1)
    monkeypatch.setattr(sharing, "SELF_CHECK", True)
    slow = sharing.same_bits

    def same_bits(a, b):
        cpu.t += 100.0
        wall.t += 0.5
        return slow(a, b)

    monkeypatch.setattr(sharing, "same_bits", same_bits)
    c0 = cpu.reads
    lead, follow = step(0), step(1)
    assert cpu.reads - c0 == 2  # the leader's product only
    # the leader's snapshot checks and describe checks (four compares), the follower's memo-hit checks (two): only
    # the light part of each, the wall ticks outside the compares
    assert abs(lead - 5e-6) < 1e-9 and abs(follow - 3e-6) < 1e-9


def test_a_preempted_check_is_charged_at_most_the_clamp(monkeypatch):
    """A check whose wall time includes another thread's time slice is charged LIGHT_CLAMP, not the slice."""
    group, cpu, wall, _, step = _pair(monkeypatch, wall_step=0.004)
    step(0)
    step(1)
    assert np.allclose([step(0), step(1)], sharing.LIGHT_CLAMP, rtol=1e-9, atol=0)


def test_the_staff_conv_grouped_reads_the_thread_clock_twice_per_computed_product(monkeypatch):
    """The staff conv's large and bias calls (the same X and W) in one group: the outputs are each call's own; the
    thread clock is read twice per product the leader computes (its cost) and twice per compare, snapshot or copy
    -- the old code read it three times per computed product and twice per reused one."""
    clock_reads = [0]
    heavy = [0]
    real, real_heavy = sharing._thread_time, ShareGroup._heavy

    def counted() -> float:
        clock_reads[0] += 1
        return real()

    def counted_heavy(self, fn, *args):
        heavy[0] += 1
        return real_heavy(self, fn, *args)

    monkeypatch.setattr(sharing, "_thread_time", counted)
    monkeypatch.setattr(ShareGroup, "_heavy", counted_heavy)
    monkeypatch.setattr(sharing, "SELF_CHECK", False)
    rng = np.random.default_rng(3)
    x = rng.random((4, 128, 32, 16), dtype=np.float32)
    w = rng.random((128, 128, 3, 3), dtype=np.float32)
    members = []
    for bias in (np.zeros(128, np.float32), rng.random(128, dtype=np.float32)):
        data, _ = stream.record(CONV.fused_conv2d_maxpool, [x, w, bias], {"pool_size": 1})
        members.append((stream.loads(stream.dumps(data)), [x, w, bias], {"pool_size": 1}))
    alone = [stream.replay(s, a, kw) for s, a, kw in members]
    grouped, figures = stream.replay_group(members)
    for a, g in zip(alone, grouped, strict=True):
        assert np.array_equal(a.outputs.view(np.uint32), g.outputs.view(np.uint32))
    n = figures["misses"]
    assert figures["hits"] == n > 0 and 0 < heavy[0] < n
    assert clock_reads[0] == 2 * n + 2 * heavy[0] < 3 * n + 2 * n
    assert figures["borrowed_seconds"][1] > 0.0
