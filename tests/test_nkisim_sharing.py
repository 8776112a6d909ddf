"""Streams replayed as one lockstep group (nkisim.stream.replay_group, nkisim.core.sharing) give each member exactly
what replaying it alone gives: outputs bit for bit, every trace field, metadata and memory peaks, and its own error;
products of bit-identical operands are computed once."""

from __future__ import annotations

import copy

import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest
from nkisim_util import load_repo_module

from nkisim import stream
from nkisim.core import access, context, sharing
from nkisim.core.ops import dma as dma_ops
from nkisim.core.sharing import ShareGroup, same_bits

CONV = load_repo_module("grader/reference/part2/conv2d.py", "share_ref_conv")
RELAXED = load_repo_module("grader/reference/relaxed/part2/conv2d.py", "share_ref_relaxed")
LEGACY = load_repo_module("grader/reference/legacy/part2/conv2d.py", "share_ref_legacy")


def _fields(trace) -> list:
    return [[getattr(i, k) for k in i.__slots__] for i in trace.instrs]


def _same(alone, grouped) -> None:
    assert not isinstance(grouped, BaseException), grouped
    assert _fields(grouped.trace) == _fields(alone.trace)
    assert grouped.trace.meta == alone.trace.meta
    assert (grouped.peak_sbuf_bytes, grouped.peak_psum_bytes) == (alone.peak_sbuf_bytes, alone.peak_psum_bytes)
    got, want = grouped.outputs, alone.outputs
    assert got.dtype == want.dtype and got.shape == want.shape
    # bitwise: NaN, -0.0 and every rounding as the separate run made them
    assert np.array_equal(got.view(np.uint8), want.view(np.uint8))


def _conv_members(mod, b, ci, co, h, w, dt, seed=3, variants=(("zeros", 1), ("random", 1), ("random", 2))):
    rng = np.random.default_rng(seed)
    x = rng.random((b, ci, h, w), dtype=np.float32).astype(dt)
    wt = rng.random((co, ci, 3, 3), dtype=np.float32).astype(dt)
    members = []
    for bias_kind, pool in variants:
        bias = np.zeros(co, dt) if bias_kind == "zeros" else rng.random(co, dtype=np.float32).astype(dt)
        args, kwargs = [x, wt, bias], {"pool_size": pool}
        data, _ = stream.record(mod.fused_conv2d_maxpool, args, kwargs)
        members.append((stream.loads(stream.dumps(data)), args, kwargs))
    return members


def _alone(members):
    return [stream.replay(s, [a.copy() for a in args], dict(kw)) for s, args, kw in members]


@pytest.mark.parametrize("mod", [CONV, RELAXED, LEGACY], ids=["reference", "relaxed", "legacy"])
@pytest.mark.parametrize("case", [(4, 128, 128, 32, 16, np.float32), (2, 256, 128, 18, 20, np.float16)],
                         ids=["f32-batch4", "f16"])
def test_the_staff_convs_grouped_are_their_separate_replays_bit_for_bit(mod, case, monkeypatch):
    monkeypatch.setattr(sharing, "SELF_CHECK", True)
    members = _conv_members(mod, *case)
    alone = _alone(members)
    grouped, figures = stream.replay_group(members)
    for a, g in zip(alone, grouped, strict=True):
        _same(a, g)
    # large, bias and maxpool multiply the same X and W in the same order: the two later ones reuse every product
    assert figures["misses"] > 0 and figures["hits"] == 2 * figures["misses"]
    assert context._STACK == []  # the module state the members swapped is the caller's again


def test_members_whose_inputs_or_programs_differ_compute_their_own_products():
    same = _conv_members(CONV, 2, 128, 128, 16, 16, np.float32, variants=(("random", 1), ("random", 1)))
    other_x = _conv_members(CONV, 2, 128, 128, 16, 16, np.float32, seed=4, variants=(("random", 1),))
    other_kernel = _conv_members(RELAXED, 2, 128, 128, 16, 16, np.float32, variants=(("random", 1),))
    members = [same[0], other_x[0], other_kernel[0], same[1]]
    grouped, figures = stream.replay_group(members)
    for a, g in zip(_alone(members), grouped, strict=True):
        _same(a, g)
    per_run = figures["misses"] + figures["hits"]
    assert figures["hits"] > 0  # the last member found the first one's products, across the two in between
    assert figures["misses"] >= 3 * per_run // 4  # the three different members computed all of theirs


def test_a_group_that_reuses_nothing_stops_looking_and_changes_no_value(monkeypatch):
    """Members whose products never coincide (another X): once the later member has looked for PROBE products and
    found none, the checks cost more than the nothing they saved, so the group stops sharing (core.sharing, "Sharing
    that does not pay stops"): each member computes its own products from then on, with the values and trace it
    gets alone."""
    monkeypatch.setattr(sharing, "SELF_CHECK", True)
    one = _conv_members(CONV, 4, 128, 128, 32, 16, np.float32, variants=(("random", 1),))
    other = _conv_members(CONV, 4, 128, 128, 32, 16, np.float32, seed=4, variants=(("random", 1),))
    members = [one[0], other[0]]
    _, whole = stream.replay_group(members)  # the default probe is longer than these runs: no decision
    assert not whole["stopped_sharing"] and whole["hits"] == 0
    per_run = whole["misses"] // 2
    monkeypatch.setattr(sharing, "WINDOW", 2)  # these convs make 36 matmuls a run
    monkeypatch.setattr(sharing, "PROBE", 8)
    assert per_run > 4 * sharing.PROBE
    grouped, figures = stream.replay_group(members)
    for a, g in zip(_alone(members), grouped, strict=True):
        _same(a, g)
    assert figures["stopped_sharing"] and figures["hits"] == 0
    # it stopped at the later member's hand-over when it had looked for PROBE products (the earlier member had made
    # as many); after that nothing is counted
    assert figures["misses"] == 2 * sharing.PROBE
    assert figures["borrowed_seconds"] == [0.0, 0.0]


@pytest.mark.parametrize("mod", [CONV, LEGACY], ids=["reference", "legacy"])
def test_a_group_that_stops_sharing_midway_gives_every_member_its_separate_run(mod, monkeypatch):
    """Members that do share (large, bias, maxpool: the same X and W), made to stop after the probe (COST_LIMIT 0:
    any check costs more than allowed): the products reused before the stop and computed after it make the
    member's outputs and trace bit for bit those of its run alone."""
    monkeypatch.setattr(sharing, "SELF_CHECK", True)
    monkeypatch.setattr(sharing, "WINDOW", 2)
    monkeypatch.setattr(sharing, "PROBE", 8)
    monkeypatch.setattr(sharing, "COST_LIMIT", 0.0)
    members = _conv_members(mod, 4, 128, 128, 32, 16, np.float32)
    grouped, figures = stream.replay_group(members)
    for a, g in zip(_alone(members), grouped, strict=True):
        _same(a, g)
    assert figures["stopped_sharing"]
    assert 0 < figures["hits"] and figures["hits"] + figures["misses"] <= 3 * (sharing.PROBE + sharing.WINDOW) < 3 * 36
    assert figures["borrowed_seconds"][0] == 0.0 and figures["borrowed_seconds"][1] > 0.0
    assert context._STACK == []


def _break_midway(s: dict) -> dict:
    """The stream with a call about two thirds in naming no function: the replay raises StreamError there, after
    it made instructions and matmuls."""
    bad = copy.deepcopy(s)
    calls = [i for i, ev in enumerate(bad["events"]) if ev[0] == "call"]
    bad["events"][calls[2 * len(calls) // 3]][1] = 10**6
    return bad


def test_a_member_that_fails_midway_or_is_malformed_leaves_the_others_as_they_are_alone():
    members = _conv_members(CONV, 2, 128, 128, 16, 16, np.float32)
    broken = (_break_midway(members[0][0]), members[0][1], members[0][2])
    forged = ({"format": "something else"}, members[1][1], members[1][2])
    group = [broken, members[0], forged, members[1], members[2]]
    grouped, figures = stream.replay_group(group)
    assert isinstance(grouped[0], stream.StreamError) and "malformed function index" in str(grouped[0])
    with pytest.raises(stream.StreamError, match="malformed function index"):  # the error it raises alone
        stream.replay(broken[0], broken[1], broken[2])
    assert isinstance(grouped[2], stream.StreamError) and "format" in str(grouped[2])
    for a, g in zip(_alone(members), (grouped[1], grouped[3], grouped[4]), strict=True):
        _same(a, g)
    assert figures["hits"] > 0


def test_without_sharing_the_members_run_one_after_another_with_the_same_results():
    members = _conv_members(CONV, 2, 128, 128, 16, 16, np.float32)
    grouped, figures = stream.replay_group(members, share=False)
    for a, g in zip(_alone(members), grouped, strict=True):
        _same(a, g)
    assert figures["hits"] == figures["misses"] == 0


@pytest.mark.parametrize("share", [True, False], ids=["lockstep", "one-after-another"])
def test_each_member_is_handed_over_as_soon_as_it_ends(share, monkeypatch):
    """replay_group(finished=): each member's run (or the Exception it raised), its CPU and borrowed seconds are
    handed over in its own turn as it ends, before the members still running end (the grader's replay process
    writes it then, round 12); its returned entry is None; values and traces are its run alone's."""
    monkeypatch.setattr(sharing, "WINDOW", 2)
    big = _conv_members(CONV, 4, 128, 128, 32, 16, np.float32, variants=(("random", 1), ("random", 2)))
    # the batch-1 timed calls beside the batch-4 ones: the first image of the same X, the same W
    x1 = big[0][1][0][:1].copy()
    small = [(s, [x1, *args[1:]], kw) for s, args, kw in
             (_conv_members(CONV, 1, 128, 128, 32, 16, np.float32, variants=(("random", 1),))[0],)]
    small = [(stream.loads(stream.dumps(stream.record(CONV.fused_conv2d_maxpool, args, kw)[0])), args, kw)
             for _, args, kw in small]
    broken = (_break_midway(big[0][0]), big[0][1], big[0][2])
    members = [big[0], small[0], broken, big[1]]
    order: list = []

    def finished(k, got, cpu, borrowed):
        order.append((k, got, cpu, borrowed, len(order)))

    grouped, figures = stream.replay_group(members, share=share, finished=finished)
    assert grouped == [None] * 4
    ended = {k: (got, cpu, borrowed, i) for k, got, cpu, borrowed, i in order}
    assert sorted(ended) == [0, 1, 2, 3]
    if share:
        # the batch-1 member makes a quarter of the matmuls: it ends first, the batch-4 members after it
        assert order[0][0] == 1 and ended[2][3] < ended[0][3] and ended[2][3] < ended[3][3]
        assert ended[0][3] < ended[3][3]  # the leader ends before the member that reuses its products
        assert ended[3][2] > 0.0 and ended[0][2] == 0.0  # the pooling member reused the leader's products
        assert figures["hits"] > 0
    else:
        assert [k for k, *_ in order] == [0, 1, 2, 3]
    assert isinstance(ended[2][0], stream.StreamError) and "malformed function index" in str(ended[2][0])
    for k, alone in zip((0, 1, 3), _alone([big[0], small[0], big[1]]), strict=True):
        _same(alone, ended[k][0])
        assert ended[k][1] > 0.0
    assert context._STACK == []


def test_same_bits_is_bitwise():
    a = np.array([[0.0, 1.0], [np.nan, 2.0]], np.float32)
    b = a.copy()
    assert same_bits(a, b)
    b[0, 0] = -0.0  # equal as floats, not as bits
    assert not same_bits(a, b)
    c = a.copy()
    assert same_bits(a, c) and not np.array_equal(a, c)  # NaN: the same bits, unequal as floats
    c[1, 1] = np.nextafter(np.float32(2.0), np.float32(3.0))
    assert not same_bits(a, c)


def test_a_group_hands_over_in_order_and_reports_each_members_error():
    group = ShareGroup(3, window=1)
    seen: list = []

    def member(k, fail=False):
        def fn():
            for i in range(3):
                seen.append((k, i))
                group.product(k, np.zeros((2, 2), np.float32), np.full((2, 2), k, np.float32), ("f",),
                              lambda mv, keep: mv * 2)
                if fail and i == 1:
                    raise RuntimeError(f"member {k}")
            return k
        return fn

    results, errors = group.run([member(0), member(1, fail=True), member(2)])
    assert results == [0, None, 2]
    assert isinstance(errors[1], RuntimeError) and errors[0] is None and errors[2] is None
    assert seen == [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1), (0, 2), (2, 2)]


# ---- the equality memo: storage versions ------------------------------------------------------------------------
def _matmuls(run) -> int:
    return sum(1 for i in run.trace.instrs if i.op == "nc_matmul" and not i.attrs.get("is_transpose"))


@pytest.mark.parametrize("first", [True, False], ids=["batch1-first", "batch1-last"])
def test_a_batch_prefix_member_shares_its_first_image_and_leaves_the_group_when_it_finishes(first, monkeypatch):
    """The grader's batch-1 timed call (X's first image) beside the batch-4 correctness calls: the batch-1 member's
    n-th matmul is the batch-4 members' n-th for the first image; it finishes early and the others run on."""
    monkeypatch.setattr(sharing, "SELF_CHECK", True)
    members = _conv_members(CONV, 3, 128, 128, 12, 16, np.float32)
    s4, args4, kw4 = members[1]
    x1 = args4[0][:1].copy()
    data, _ = stream.record(CONV.fused_conv2d_maxpool, [x1, args4[1], args4[2]], dict(kw4))
    prefix = (stream.loads(stream.dumps(data)), [x1, args4[1], args4[2]], dict(kw4))
    group = [prefix, *members] if first else [*members, prefix]
    alone = _alone(group)
    grouped, figures = stream.replay_group(group)
    for a, g in zip(alone, grouped, strict=True):
        _same(a, g)
    n1, n4 = _matmuls(alone[0 if first else -1]), _matmuls(alone[1 if first else 0])
    assert 0 < n1 < n4
    if first:  # the first batch-4 member reuses the prefix's n1 products, the two others all of the first's
        assert (figures["misses"], figures["hits"]) == (n4, n1 + 2 * n4)
    else:  # the prefix, last, reuses all of its products
        assert (figures["misses"], figures["hits"]) == (n4, 2 * n4 + n1)
    assert context._STACK == []


def test_operands_of_unchanged_storage_versions_are_compared_once():
    """The staff conv's input bands and resident weights each feed many matmuls: a follower compares each storage
    version once (after its operands have read as many bytes as it holds), not each operand."""
    pool1 = (("zeros", 1), ("random", 1), ("random", 1))  # one program: every product reused
    members = _conv_members(CONV, 2, 256, 256, 40, 64, np.float32, variants=pool1)
    grouped, figures = stream.replay_group(members)
    for a, g in zip(_alone(members), grouped, strict=True):
        _same(a, g)
    c = figures["compares"]
    assert figures["hits"] == 2 * figures["misses"]
    compares = c["storage"] + c["operands"] + c["copies"]
    assert c["memo_hits"] + compares == 2 * figures["hits"]  # two operands per reused product
    # each version is compared operand by operand only until its operands have read as many bytes as its storage
    # holds, then once whole: a few compares per input band and for the weights, against two per reused product
    # (at 224x224, batch 4: 2,5xx against 63,936)
    assert compares * 3 < figures["hits"]


@nki.jit
def _rows_kernel(X, W):
    """out[r] = W.T @ X[r] through one SBUF tile rewritten for every row (a DMA into the same storage)."""
    rows = X.shape[0]
    out = nl.ndarray((rows, 128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    w = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=w, src=W)
    x = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    for r in nl.affine_range(rows):
        nisa.dma_copy(dst=x, src=X[r])
        acc = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=acc, stationary=w, moving=x)
        res = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=acc)
        nisa.dma_copy(dst=out[r], src=res)
    return out


def _rows_members():
    rng = np.random.default_rng(5)
    w = rng.random((128, 128), dtype=np.float32)
    xa = rng.random((6, 128, 64), dtype=np.float32)
    xb = xa.copy()
    xb[2:4] += 1.0  # the same first two and last two rows, other rows in between
    out = []
    for x in (xa, xb, xa):
        data, _ = stream.record(_rows_kernel, [x, w], {})
        out.append((stream.loads(stream.dumps(data)), [x, w], {}))
    return out


def test_a_rewritten_tile_is_a_new_version_and_only_equal_versions_reuse(monkeypatch):
    monkeypatch.setattr(sharing, "SELF_CHECK", True)
    members = _rows_members()
    grouped, figures = stream.replay_group(members)
    for a, g in zip(_alone(members), grouped, strict=True):
        _same(a, g)
    # member 1 differs in rows 2 and 3 only; member 2 matches member 0 everywhere
    assert (figures["misses"], figures["hits"]) == (6 + 2, 4 + 6)


def test_the_self_check_catches_a_write_that_does_not_bump_the_version(monkeypatch):
    """Without the version bump of a write path, the memo would take a rewritten tile for its old version: the
    self-check raises instead of reusing a product of other operands."""
    monkeypatch.setattr(sharing, "SELF_CHECK", True)
    real = access.write

    def forgetful(t, values, mask=None):
        real(t, values, mask)
        t._a.gen -= 1

    monkeypatch.setattr(access, "write", forgetful)
    monkeypatch.setattr(dma_ops, "write", forgetful)
    grouped, _ = stream.replay_group(_rows_members())
    assert any(isinstance(g, sharing.SharingSelfCheckError) for g in grouped), grouped
