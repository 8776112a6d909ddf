"""Explicit placement in the current API: ``nl.ndarray(..., address=(partition_offset, free_offset))``.

The tensor is a view of the kernel's SBUF / PSUM arena (nkisim.core.placement.AddressPlacement), so overlapping
placements share values and hazards as on hardware, operand regions carry absolute partitions, and the documented
limits are errors (aws-neuron-sdk nki/migration/index.rst, "Improved allocation API").  free_offset counts bytes
(see the note in nkisim/core/placement.py for the evidence and the migration guide's contradicting prose).
Kernels are our own, checked against NumPy."""

from __future__ import annotations

import warnings

import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest
from nkisim_util import raises_rule

from nkisim.core.instr import B_PSUM, B_SBUF
from nkisim.core.rules import NKICapacityWarning
from nkisim.core.runtime import run_kernel
from nkisim.frontends import NKI
from nkisim.perf import estimate

RNG = np.random.default_rng(25)
BANK = 2048


def _f32(*shape):
    return RNG.random(shape).astype(np.float32)


def _run(kernel, args, kwargs=None, target="trn2", mode="full", simulate=False):
    return run_kernel(kernel, args, kwargs or {}, mode=mode, target=target, simulate=simulate, frontend=NKI)


# ---------------------------------------------------------------------------------------------------------------
# values


def vector_add(a, b, depth, placed):
    """The course's streamed vector add over (128, cols) tiles; every tile placed explicitly in ``depth`` rotating
    slots of three tiles (a, b, sum) when ``placed``."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    rows, cols = a.shape
    tile_bytes = cols * 4
    for r in range(rows // 128):
        slot = (r % depth) * 3 * tile_bytes
        if placed:
            ta = nl.ndarray((128, cols), dtype=a.dtype, buffer=nl.sbuf, address=(0, slot))
            tb = nl.ndarray((128, cols), dtype=b.dtype, buffer=nl.sbuf, address=(0, slot + tile_bytes))
            tc = nl.ndarray((128, cols), dtype=a.dtype, buffer=nl.sbuf, address=(0, slot + 2 * tile_bytes))
        else:  # one allocation site per tile, as in the course's kernel (each site rotates its own copies)
            ta = nl.ndarray((128, cols), dtype=a.dtype, buffer=nl.sbuf)
            tb = nl.ndarray((128, cols), dtype=b.dtype, buffer=nl.sbuf)
            tc = nl.ndarray((128, cols), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=ta, src=a[r * 128:(r + 1) * 128, :])
        nisa.dma_copy(dst=tb, src=b[r * 128:(r + 1) * 128, :])
        nisa.tensor_tensor(dst=tc, data1=ta, data2=tb, op=nl.add)
        nisa.dma_copy(dst=out[r * 128:(r + 1) * 128, :], src=tc)
    return out


def test_placed_vector_add_matches_numpy():
    a, b = _f32(1024, 512), _f32(1024, 512)
    run = _run(vector_add, (a, b), {"depth": 2, "placed": True})
    np.testing.assert_array_equal(run.outputs, a + b)
    # a fixed (partition, byte) address is always a plain view: nothing the grader must distrust (G7)
    assert "unaliased_placements" not in run.trace.meta


def transpose(a, placed, slots=2):
    """The course's matrix transpose (128 x 128 blocks through TensorE and PSUM) with every on-chip tile placed:
    SBUF input and output tiles in ``slots`` slots, PSUM tiles in banks 0..3 in turn."""
    m, n = a.shape
    out = nl.ndarray((n, m), dtype=a.dtype, buffer=nl.shared_hbm)
    k = 0
    for i in range(m // 128):
        for j in range(n // 128):
            slot = (k % slots) * 2 * 512
            if placed:
                src = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.sbuf, address=(0, slot))
                ps = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.psum, address=(0, (k % 4) * BANK))
                dst = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.sbuf, address=(0, slot + 512))
            else:
                src = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.sbuf)
                ps = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.psum)
                dst = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=src, src=a[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128])
            nisa.nc_transpose(dst=ps, data=src)
            nisa.tensor_copy(dst=dst, src=ps)
            nisa.dma_copy(dst=out[j * 128:(j + 1) * 128, i * 128:(i + 1) * 128], src=dst)
            k += 1
    return out


def test_placed_transpose_matches_numpy():
    a = _f32(256, 384)
    run = _run(transpose, (a,), {"placed": True})
    np.testing.assert_array_equal(run.outputs, a.T)
    ps_writes = [i.dsts[0].region for i in run.trace if i.op == "nc_transpose"]
    assert {r.b_lo for r in ps_writes} == {0, BANK, 2 * BANK, 3 * BANK}  # absolute bank addresses


def blocked_matmul(a_t, b):
    """C = A @ B with K in 128-row tiles accumulated in a PSUM tensor placed in bank 5; a second tensor declared at
    the same bank starts new accumulation groups, as a fresh automatic one would."""
    k, m = a_t.shape
    _, n = b.shape
    out = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.shared_hbm)
    for _ in range(2):
        acc = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.psum, address=(0, 5 * BANK))
        for kt in range(k // 128):
            lhs = nl.ndarray((128, m), dtype=a_t.dtype, buffer=nl.sbuf, address=(0, 0))
            rhs = nl.ndarray((128, n), dtype=b.dtype, buffer=nl.sbuf, address=(0, 4096))
            nisa.dma_copy(dst=lhs, src=a_t[kt * 128:(kt + 1) * 128, :])
            nisa.dma_copy(dst=rhs, src=b[kt * 128:(kt + 1) * 128, :])
            nisa.nc_matmul(dst=acc, stationary=lhs, moving=rhs)
        res = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.sbuf, address=(0, 8192))
        nisa.tensor_copy(dst=res, src=acc)
        nisa.dma_copy(dst=out, src=res)
    return out


def test_placed_psum_accumulates_and_a_new_tensor_starts_fresh():
    a_t, b = _f32(384, 128), _f32(384, 512)
    out = _run(blocked_matmul, (a_t, b)).outputs
    np.testing.assert_allclose(out, a_t.T @ b, rtol=1e-5)  # the second pass did not add onto the first


def grouped_matmuls_declared_up_front(a_t, b):
    """One PSUM tensor per row group, all declared before any matmul and all placed in bank 5 (the pattern of AWS's
    nki-library attention CTE): each group's K tiles accumulate with the inferred flag (accumulate=None) into that
    group's tensor, which is then evicted.  Group g's rows are a_t[:, g*32:(g+1)*32].T @ b."""
    k, m = a_t.shape
    _, n = b.shape
    groups = m // 32
    out = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.shared_hbm)
    accs = [nl.ndarray((32, n), dtype=nl.float32, buffer=nl.psum, address=(0, 5 * BANK)) for _ in range(groups)]
    for g in range(groups):
        for kt in range(k // 128):
            lhs = nl.ndarray((128, 32), dtype=a_t.dtype, buffer=nl.sbuf)
            rhs = nl.ndarray((128, n), dtype=b.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=lhs, src=a_t[kt * 128:(kt + 1) * 128, g * 32:(g + 1) * 32])
            nisa.dma_copy(dst=rhs, src=b[kt * 128:(kt + 1) * 128, :])
            nisa.nc_matmul(accs[g], lhs, rhs)
        res = nl.ndarray((32, n), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=accs[g])
        nisa.dma_copy(dst=out[g * 32:(g + 1) * 32, :], src=res)
    return out


@pytest.mark.parametrize("mode", ["full", "timing"])
def test_each_placed_psum_tensor_infers_its_own_accumulation_groups(mode):
    """nki.isa.nc_matmul, accumulate=None: "first write overwrites, subsequent writes accumulate", per tensor: the
    first matmul into each group's tensor starts new groups although the previous group's tensor, at the same
    address, was written (and read) before.  Checked against NumPy; sharing the flags by address gave group g the
    sum of groups 0..g.  A tensor reused for a second pass keeps accumulating (its flags are its own)."""
    a_t, b = _f32(256, 128), _f32(256, 64)
    run = _run(grouped_matmuls_declared_up_front, (a_t, b), mode=mode)
    if mode == "full":
        np.testing.assert_allclose(run.outputs, a_t.T @ b, rtol=1e-5)

    def reused(a_t, b):
        out = nl.ndarray((32, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.ndarray((32, 64), dtype=nl.float32, buffer=nl.psum, address=(0, 5 * BANK))
        for _ in range(2):  # the same tensor twice: the second pass accumulates onto the first
            for kt in range(2):
                lhs = nl.ndarray((128, 32), dtype=a_t.dtype, buffer=nl.sbuf)
                rhs = nl.ndarray((128, 64), dtype=b.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=lhs, src=a_t[kt * 128:(kt + 1) * 128, 0:32])
                nisa.dma_copy(dst=rhs, src=b[kt * 128:(kt + 1) * 128, :])
                nisa.nc_matmul(acc, lhs, rhs)
        res = nl.ndarray((32, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=acc)
        nisa.dma_copy(dst=out, src=res)
        return out

    if mode == "full":
        np.testing.assert_allclose(_run(reused, (a_t, b)).outputs, 2 * (a_t[:, 0:32].T @ b), rtol=1e-5)


# ---------------------------------------------------------------------------------------------------------------
# aliasing: what hardware does when placements overlap


def overlapping(a):
    """``whole`` covers partitions 0..127, bytes 0..255; ``cols`` is bytes 128..255 of every partition and
    ``rows`` partitions 64..127 of bytes 0..255: both see what was written through ``whole``."""
    whole = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf, address=(0, 0))
    nisa.dma_copy(dst=whole, src=a)
    cols = nl.ndarray((128, 32), dtype=nl.float32, buffer=nl.sbuf, address=(0, 128))
    rows = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.sbuf, address=(64, 0))
    out_cols = nl.ndarray((128, 32), dtype=nl.float32, buffer=nl.shared_hbm)
    out_rows = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out_cols, src=cols)
    nisa.dma_copy(dst=out_rows, src=rows)
    return out_cols, out_rows


def test_overlapping_placements_alias_values():
    a = _f32(128, 64)
    run = _run(overlapping, (a,))
    out_cols, out_rows = run.outputs
    np.testing.assert_array_equal(out_cols, a[:, 32:])
    np.testing.assert_array_equal(out_rows, a[64:, :])
    # the reads through the aliases depend on the write through `whole`: same physical buffer, overlapping region
    write = next(i for i in run.trace if i.op == "dma_copy").dsts[0].region
    reads = [i.srcs[0].region for i in run.trace if i.op == "dma_copy"][1:]
    assert all(write.overlaps(r) for r in reads)


def reused_address(a, b):
    """Two tiles live at once at the same address: the second load overwrites the first (the compiler does not
    protect explicitly placed tensors from each other), so the sum is b + b."""
    ta = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.sbuf, address=(0, 1024))
    tb = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.sbuf, address=(0, 1024))
    nisa.dma_copy(dst=ta, src=a)
    nisa.dma_copy(dst=tb, src=b)
    tc = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.sbuf, address=(0, 8192))
    nisa.tensor_tensor(dst=tc, data1=ta, data2=tb, op=nl.add)
    out = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=tc)
    return out


def test_one_address_for_two_live_tiles_clobbers_as_on_hardware():
    a, b = _f32(128, 256), _f32(128, 256)
    run = _run(reused_address, (a, b), mode="full")
    np.testing.assert_array_equal(run.outputs, b + b)
    # the second load writes the first one's bytes: a WAW hazard the scheduler must respect (same buffer, overlap)
    first, second = [i.dsts[0].region for i in run.trace if i.op == "dma_copy"][:2]
    assert first == second


def partition_offsets(a, by_engine=False):
    """A 32-partition tile at partition 32 and a slice of it: the operands carry absolute partitions.  The slice
    [40, 48) moves to [96, 104) by DMA; a VectorE copy cannot make that move (G10: 8 partitions start at 0, 32, 64
    or 96), and the rule sees the absolute partitions."""
    t = nl.ndarray((32, 64), dtype=nl.float32, buffer=nl.sbuf, address=(32, 512))
    assert t.address == (32, 512) and t[8:16, 4:].address == (40, 528)
    assert nl.ndarray((32, 64), dtype=nl.float32, buffer=nl.sbuf).address is None  # placed by the compiler
    nisa.dma_copy(dst=t, src=a)
    u = nl.ndarray((8, 64), dtype=nl.float32, buffer=nl.sbuf, address=(96, 0))
    if by_engine:
        nisa.tensor_copy(dst=u, src=t[8:16, :])
    else:
        nisa.dma_copy(dst=u, src=t[8:16, :])
    out = nl.ndarray((8, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=u)
    return out


def test_regions_carry_absolute_partitions():
    a = _f32(32, 64)
    run = _run(partition_offsets, (a,))
    np.testing.assert_array_equal(run.outputs, a[8:16])
    load, copy = [i for i in run.trace][:2]
    assert (load.dsts[0].region.p_lo, load.dsts[0].region.p_hi, load.dsts[0].region.b_lo) == (32, 64, 512)
    assert (copy.srcs[0].region.p_lo, copy.srcs[0].region.p_hi) == (40, 48)  # partition_offset + slice offset
    assert (copy.dsts[0].region.p_lo, copy.dsts[0].region.p_hi) == (96, 104)
    assert copy.srcs[0].region.buf == B_SBUF and copy.srcs[0].region.phys == copy.dsts[0].region.phys
    with raises_rule("nkisim_cross_partition", "[40, 48)", "[96, 104)"):
        _run(partition_offsets, (a,), {"by_engine": True})


def test_psum_placements_share_one_bank_space():
    """Two PSUM tensors in the same bank alias: a transpose written through one is read through the other."""

    def kernel(a):
        src = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf, address=(0, 0))
        nisa.dma_copy(dst=src, src=a)
        ps = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum, address=(0, 6 * BANK))
        nisa.nc_transpose(dst=ps, data=src)
        half = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.psum, address=(0, 6 * BANK))
        res = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf, address=(0, 1024))
        nisa.tensor_copy(dst=res, src=half)
        out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=res)
        return out

    a = _f32(128, 128)
    run = _run(kernel, (a,))
    np.testing.assert_array_equal(run.outputs, a.T[:, :64])
    regions = [op.region for i in run.trace for op in i.srcs + i.dsts if op.region.buf == B_PSUM]
    assert len({r.phys for r in regions}) == 1


# ---------------------------------------------------------------------------------------------------------------
# explicit and automatic allocation in one kernel


def test_explicit_and_automatic_allocation_coexist():
    """AWS's nki-library mixes them (FlashAttention forward: placed pipeline buffers, a compiler-placed softmax
    state); the values do not interfere and the placed bytes count against what automatic allocation may use."""

    def kernel(a, reserve_bytes):
        big = nl.ndarray((128, reserve_bytes // 4), dtype=nl.float32, buffer=nl.sbuf, address=(0, 0))
        nisa.memset(dst=big, value=0.0)
        t = nl.ndarray((128, 4096), dtype=nl.float32, buffer=nl.sbuf)  # 16 KiB per partition, automatic
        nisa.dma_copy(dst=t, src=a)
        out = nl.ndarray((128, 4096), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    a = _f32(128, 4096)
    run = _run(kernel, (a, 64 * 1024))
    np.testing.assert_array_equal(run.outputs, a)
    assert run.peak_sbuf_bytes >= 64 * 1024 + 16 * 1024
    # trn2 usable SBUF is 212,984 B per partition: 200 KiB placed leaves no room for the 16 KiB automatic tile
    with raises_rule("nkisim_sbuf_capacity", "explicit placements (nl.ndarray address=)"):
        _run(kernel, (a, 200 * 1024))


# ---------------------------------------------------------------------------------------------------------------
# errors


def _placed(shape, dtype, buffer, address):
    def kernel(a):
        t = nl.ndarray(shape, dtype=dtype, buffer=buffer, address=address)
        if buffer is nl.sbuf:
            nisa.dma_copy(dst=t, src=a)
        return a

    return kernel


@pytest.mark.parametrize("address", [(0,), (0, 0, 0), 5, (0, 1.5), (True, 0), "0,0"])
def test_address_must_be_a_pair_of_integers(address):
    with raises_rule("nkisim_address_form", f"address={address!r}"):
        _run(_placed((128, 64), nl.float32, nl.sbuf, address), (_f32(128, 64),))


def test_address_offsets_must_not_be_negative():
    with raises_rule("nkisim_address_negative", "address=(0, -4)"):
        _run(_placed((128, 64), nl.float32, nl.sbuf, (0, -4)), (_f32(128, 64),))
    with raises_rule("nkisim_address_negative", "address=(-1, 0)"):
        _run(_placed((128, 64), nl.float32, nl.sbuf, (-1, 0)), (_f32(128, 64),))


@pytest.mark.parametrize("buffer", [nl.hbm, nl.shared_hbm])
def test_address_is_for_on_chip_tensors(buffer):
    with raises_rule("nkisim_address_hbm", "leave address unset", buffer.name):
        _run(_placed((128, 64), nl.float32, buffer, (0, 0)), (_f32(128, 64),))


def test_placement_must_fit_the_partitions():
    with raises_rule("nkisim_address_partitions", "partition_offset 64 with 128 partitions", "[64, 64 + 128)"):
        _run(_placed((128, 64), nl.float32, nl.sbuf, (64, 0)), (_f32(128, 64),))
    with raises_rule("nkisim_address_partitions", "partition_offset 97 with 32 partitions"):
        _run(_placed((32, 64), nl.float32, nl.psum, (97, 0)), (_f32(32, 64),))
    _run(_placed((32, 64), nl.float32, nl.sbuf, (96, 0)), (_f32(32, 64),))  # ends exactly at 128


@pytest.mark.parametrize(("target", "usable"), [("trn2", 212984), ("trn1", 180224)])
def test_sbuf_placement_must_fit_the_usable_bytes(target, usable):
    top = usable - 256  # a (128, 64) fp32 tile is 256 B per partition: the last one that fits
    _run(_placed((128, 64), nl.float32, nl.sbuf, (0, top)), (_f32(128, 64),), target=target)
    with raises_rule("nkisim_address_sbuf_range", f"[{top + 4}, {usable + 4})", f"{usable} usable on {target}"):
        _run(_placed((128, 64), nl.float32, nl.sbuf, (0, top + 4)), (_f32(128, 64),), target=target)
    # nki.simulate_kernel does not check capacity: inside the physical partition it only warns
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _run(_placed((128, 64), nl.float32, nl.sbuf, (0, top + 4)), (_f32(128, 64),), target=target, simulate=True)
    assert any(issubclass(w.category, NKICapacityWarning) for w in caught)


def test_psum_placement_must_start_a_bank():
    for f in (1024, 4, BANK + 512):
        with raises_rule("nkisim_address_psum_bank", f"free_offset {f} does not start", "2048-byte bank"):
            _run(_placed((128, 128), nl.float32, nl.psum, (0, f)), (_f32(128, 128),))
    # the migration guide's example: a (128, 1024) bfloat16 tensor (one full bank) on bank 3
    _run(_placed((128, 1024), nl.bfloat16, nl.psum, (0, 3 * BANK)), (_f32(128, 128),))


def test_psum_placement_must_fit_the_eight_banks():
    _run(_placed((128, 512), nl.float32, nl.psum, (0, 7 * BANK)), (_f32(128, 128),))  # the last bank, full
    with raises_rule("nkisim_address_psum_range", "[14336, 18432)", "16384 bytes of PSUM (8 banks of 2048"):
        _run(_placed((128, 1024), nl.float32, nl.psum, (0, 7 * BANK)), (_f32(128, 128),))


# ---------------------------------------------------------------------------------------------------------------
# timing


def test_placed_kernel_times_like_the_automatic_one():
    """Placed in as many rotating slots as the automatic allocator keeps per allocation site (five, core.memory
    ROTATION_DEPTH + 1), the streamed add and the transpose time as the automatic ones do (modelled: 51.18 us and
    82.14 us on trn2, ratio 1.000); with two slots (double buffering) the loads of tile i + 2 wait until tile i is
    consumed, so it is slower (61.38 us, 99.61 us)."""
    a, b = _f32(2048, 512), _f32(2048, 512)
    x = _f32(1024, 1024)

    def us(kernel, args, **kwargs):
        return estimate(_run(kernel, args, kwargs, mode="timing").trace, "trn2").total_us

    auto, five, two = (us(vector_add, (a, b), depth=d, placed=p) for d, p in ((5, False), (5, True), (2, True)))
    assert five == pytest.approx(auto, rel=0.02) and two > five
    auto, five, two = (us(transpose, (x,), placed=p, slots=s) for p, s in ((False, 2), (True, 5), (True, 2)))
    assert five == pytest.approx(auto, rel=0.02) and two > five


def strided_views(a, placed):
    """``.ap`` views of a [128, 64] tile: every other column of all partitions, and a window of a slice (its own
    storage offset), each copied out on VectorE; a third view is written through.  Placed, the tile is a region of
    the arena whose partitions lie a whole arena row apart; the pattern's partition stride is still the tile's 64
    elements per partition (NkiTensor.ap docs)."""
    kw = {"address": (0, 1024)} if placed else {}
    t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf, **kw)
    nisa.dma_copy(dst=t, src=a)
    even = nl.ndarray((128, 32), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=even, src=t.ap([[64, 128], [2, 32]]))
    window = nl.ndarray((32, 16), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=window, src=t[32:64, 8:].ap([[64, 32], [1, 16]]))
    nisa.memset(dst=t.ap([[64, 128], [1, 4]], offset=60), value=-1.0)  # the last 4 columns
    outs = []
    for tile in (even, window, t):
        o = nl.ndarray(tile.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o, src=tile)
        outs.append(o)
    return tuple(outs)


def test_access_patterns_on_a_placed_tensor_match_numpy_and_the_automatic_twin():
    a = _f32(128, 64)
    placed = _run(strided_views, (a,), {"placed": True})
    even, window, whole = placed.outputs
    np.testing.assert_array_equal(even, a[:, ::2])
    np.testing.assert_array_equal(window, a[32:64, 8:24])
    np.testing.assert_array_equal(whole, np.concatenate([a[:, :60], np.full((128, 4), -1.0, np.float32)], axis=1))
    auto = _run(strided_views, (a,), {"placed": False})
    for x, y in zip(placed.outputs, auto.outputs):
        np.testing.assert_array_equal(x, y)
    # the window's operand carries the placed tile's absolute bytes: partition 32, free byte 1024 + 8 * 4
    window_copy = [i for i in placed.trace if i.op == "tensor_copy"][1]
    region = window_copy.srcs[0].region
    assert (region.p_lo, region.p_hi, region.b_lo) == (32, 64, 1024 + 32)


def out_of_storage(a):
    t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf, address=(0, 0))
    nisa.dma_copy(dst=t, src=a)
    d = nl.ndarray((64, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=d, src=t.ap([[64, 64], [1, 8]], offset=60))  # columns 60..67: past the row
    out = nl.ndarray((64, 8), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=d)
    return out


def test_an_access_pattern_on_a_placed_tensor_stays_in_its_rows():
    """The neighbouring arena bytes of a placed tile are not its storage: a free walk past its 64 elements is the
    same error as on an automatically placed tile, not a read of whatever the arena holds there."""
    with raises_rule("nkisim_view", "each partition of this tensor holds 64 elements"):
        _run(out_of_storage, (_f32(128, 64),))
