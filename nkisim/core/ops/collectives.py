"""Collective communication (``nki.collectives``) and DMA-engine arithmetic (``nisa.dma_compute``).

AWS documents the collectives for one configuration: an LNC=2 launch whose replica-group rank-lists hold 4 ranks
(intra-chip): "Only LNC=2 is supported", "Each rank-list must have exactly 4 ranks (intra-chip)" (nki.collectives,
NKI 0.6, all_gather_v "Current limitations"; all_to_all_v: "requires LNC=2", "4 under LNC=2").  nkisim models one
NeuronCore, so it runs none of them.  A replica group of one rank at LNC=1 is not a documented form either: nkisim
used to run it as a local copy, a collective the hardware does not offer that cost what a copy costs (grading
security, V5); every collective is now refused with the documented limits.  The operand checks and the one-rank
data movement below stay for the day nkisim models the 4-rank LNC=2 form; ``check_group`` runs first.
"""

from __future__ import annotations

import math

import numpy as np

from nkisim.core import execute
from nkisim.core.access import check_writable, dynamic_tiles, mark_written, read, runtime_bounds, same_view, write
from nkisim.core.context import current
from nkisim.core.instr import B_HBM, B_PSUM, B_SBUF, E_DMA
from nkisim.core.ops.common import need_on_chip, need_tensor
from nkisim.core.ops.dma import _mark_descriptors, dma_copy
from nkisim.core.rules import fail
from nkisim.core.tensor import Tensor

ONE_CORE = ("nkisim models one NeuronCore and AWS documents nki.collectives only for LNC=2 launches with rank-lists "
            "of exactly 4 ranks (intra-chip; nki.collectives, NKI 0.6: 'Only LNC=2 is supported', 'Each rank-list "
            "must have exactly 4 ranks'), so nkisim runs no collective; a one-rank group at LNC=1 is not a "
            "documented form.  Move data within one core with nisa.dma_copy")
_REDUCE_OPS = ("add", "minimum", "maximum")


def check_group(groups, op: str) -> None:
    """Refuse the collective, naming the group, the launch and the documented configuration."""
    ctx = current(op)
    ranks = [list(g) for g in groups]
    flat = [int(r) for g in ranks for r in g]
    launch = f"an LNC={math.prod(ctx.grid)} launch (kernel[lnc])" if ctx.grid else "an LNC=1 launch"
    raise NotImplementedError(f"ncol.{op}: replica group {ranks} has {len(flat)} rank(s) in {len(ranks)} group(s), "
                              f"in {launch}; {ONE_CORE}")


def _pairs(srcs, dsts, op: str, sbuf_ok: bool = True) -> list[tuple[Tensor, Tensor]]:
    srcs, dsts = list(srcs), list(dsts)
    if not srcs or len(srcs) != len(dsts):
        fail("nkisim_bad_argument", op=op, detail=f"srcs and dsts must be lists of the same length >= 1 (got "
             f"{len(srcs)} and {len(dsts)})")
    tiles = [need_tensor(t, op, "srcs") for t in srcs] + [need_tensor(t, op, "dsts") for t in dsts]
    kinds = {t.kind for t in tiles}
    if B_PSUM in kinds:
        need_on_chip(next(t for t in tiles if t.kind == B_PSUM), op, "srcs/dsts", (B_HBM, B_SBUF))
    if len(kinds) > 1:
        fail("nkisim_bad_argument", op=op, detail="all tensors must be on HBM or all on SBUF (mixing memory spaces "
             "is not supported)")
    if B_SBUF in kinds and (not sbuf_ok or len(srcs) > 1):
        fail("nkisim_bad_argument", op=op, detail="SBUF tensors are not supported here" if not sbuf_ok else
             "coalesced collectives (several tensors) need HBM tensors")
    return list(zip(srcs, dsts))


def _copy(src: Tensor, dst: Tensor, op: str) -> None:
    """One rank's contribution lands in its own destination: a DMA of the same elements."""
    if math.prod(src.shape) != math.prod(dst.shape):
        fail("nkisim_dma_element_mismatch", src=list(src.shape), dst=list(dst.shape))
    dma_copy(src, dst, via=op)


def all_reduce(srcs, dsts, groups, op: str) -> None:
    check_group(groups, "all_reduce")
    if op not in _REDUCE_OPS:
        fail("nkisim_bad_argument", op="all_reduce", detail=f"op must be nl.add, nl.minimum or nl.maximum, not {op}")
    for s, d in _pairs(srcs, dsts, "all_reduce"):
        _copy(s, d, "all_reduce")


def _split_dim(s: Tensor, d: Tensor, dim: int, op: str, allowed: tuple[int, ...]) -> None:
    if int(dim) not in allowed:
        fail("nkisim_bad_argument", op=op, detail=f"collective_dim {dim} is not supported here (supported: "
             f"{', '.join(map(str, allowed))})")
    if tuple(s.shape) != tuple(d.shape):  # one rank: the concatenation / split of one chunk is the chunk
        fail("nkisim_shape_mismatch", op=op, shapes=[list(s.shape), list(d.shape)],
             detail=" (with one rank, dst has src's shape)")


def all_gather(srcs, dsts, groups, collective_dim: int) -> None:
    check_group(groups, "all_gather")
    for s, d in _pairs(srcs, dsts, "all_gather"):
        _split_dim(s, d, collective_dim, "all_gather", (0,) if s.kind == B_HBM else (0, 1))
        _copy(s, d, "all_gather")


def reduce_scatter(srcs, dsts, groups, collective_dim: int, op: str) -> None:
    check_group(groups, "reduce_scatter")
    if op not in _REDUCE_OPS:
        fail("nkisim_bad_argument", op="reduce_scatter", detail=f"op must be nl.add, nl.minimum or nl.maximum, "
             f"not {op}")
    for s, d in _pairs(srcs, dsts, "reduce_scatter"):
        _split_dim(s, d, collective_dim, "reduce_scatter", (0,))
        _copy(s, d, "reduce_scatter")


def all_to_all(srcs, dsts, groups, collective_dim: int) -> None:
    check_group(groups, "all_to_all")
    for s, d in _pairs(srcs, dsts, "all_to_all", sbuf_ok=False):
        _split_dim(s, d, collective_dim, "all_to_all", (0,))
        _copy(s, d, "all_to_all")


def _metadata(md: Tensor, rows: int, op: str) -> np.ndarray | None:
    md = need_tensor(md, op, "metadata_tensor")
    want = (rows, 1) if md.kind == B_HBM else (1, rows, 1)
    if tuple(md.shape) != want or md.dtype != np.uint32:
        fail("nkisim_bad_argument", op=op, detail=f"metadata_tensor must be uint32 of shape {list(want)} for one "
             f"rank on {'HBM' if md.kind == B_HBM else 'SBUF'}, got {md.dtype}{list(md.shape)}")
    ctx = current(op)
    return np.asarray(read(md)).reshape(rows).astype(np.int64) if ctx.full else None


def variable(srcs, dsts, groups, metadata_tensor, recv_counts_known: bool, has_rdispls: bool, op: str) -> None:
    """``all_gather_v`` / ``all_to_all_v`` of one rank: ``dst.flat[rd : rd + n] = src.flat[sd : sd + n]`` with
    ``n = send_count``, ``sd = send_displ`` (rows 0/1), ``rd = recv_displs[0]`` (row 3) or 0 (slot 0); row 2 gets
    the received count unless ``recv_counts_known``."""
    check_group(groups, op)
    ctx = current(op)
    ctx.settle()
    (s, d), = _one(srcs, dsts, op)
    if s.kind != B_HBM or d.kind != B_HBM:
        fail("nkisim_bad_argument", op=op, detail="srcs and dsts must be HBM tensors")
    rows = 4 if has_rdispls else 3
    md = _metadata(metadata_tensor, rows, op)
    check_writable(d)
    n_src, n_dst = math.prod(s.shape), math.prod(d.shape)
    if md is not None:
        count, sd = int(md[0]), int(md[1])
        rd = int(md[3]) if has_rdispls else 0
        if sd + count > n_src or rd + count > n_dst or count < 0:
            fail("nkisim_bad_argument", op=op, detail=f"send_count {count} at send_displ {sd} / recv_displ {rd} "
                 f"runs past src ({n_src} elements) or dst ({n_dst} elements)")
        nbytes = count * d.dtype.itemsize
    else:
        count = sd = rd = 0
        nbytes = min(n_src, n_dst) * d.dtype.itemsize  # timing mode: the counts are data; the whole slot is priced
    dsts = (d,) if recv_counts_known else (d, metadata_tensor)  # row 2 receives the count
    ctx.emit("dma_copy", E_DMA, (s, metadata_tensor), dsts, {"bytes": nbytes, "via": op, "cast": s.dtype != d.dtype})
    if md is not None:
        flat = np.array(read(d)).reshape(-1)
        flat[rd:rd + count] = execute.cast(execute.to_f32(np.asarray(read(s)).reshape(-1)[sd:sd + count])
                                           if s.dtype != d.dtype else np.asarray(read(s)).reshape(-1)[sd:sd + count],
                                           d.dtype)
        write(d, flat.reshape(d.shape))
        if not recv_counts_known:
            mdv = np.asarray(read(metadata_tensor)).copy().reshape(rows)
            mdv[2] = count
            write(metadata_tensor, mdv.reshape(metadata_tensor.shape))
            mark_written(metadata_tensor)


def _one(srcs, dsts, op: str):
    pairs = _pairs(srcs, dsts, op)
    if len(pairs) != 1:
        fail("nkisim_bad_argument", op=op, detail="exactly one src and one dst tensor are supported")
    return pairs


def collective_permute(srcs, dsts, source_target_pairs) -> None:
    """Explicit (source, target) pairs: with one rank only ``(0, 0)`` exists (a copy); no pair leaves dst alone."""
    pairs = [tuple(int(x) for x in p) for p in source_target_pairs]
    check_group([sorted({r for p in pairs for r in p}) or [0]], "collective_permute")
    if any(p != (0, 0) for p in pairs):
        raise NotImplementedError(f"ncol.collective_permute: source_target_pairs {pairs} name ranks other than 0; "
                                  f"{ONE_CORE}")
    (s, d), = _one(srcs, dsts, "collective_permute")
    if s.kind != B_HBM:
        fail("nkisim_bad_argument", op="collective_permute", detail="tensors must be on HBM")
    if pairs:
        _copy(s, d, "collective_permute")


def _channels(by_channel, channel_ids, op: str) -> list[Tensor]:
    ids = [int(c) for c in channel_ids]
    if ids != list(range(len(ids))):
        fail("nkisim_bad_argument", op=op, detail=f"channel_ids must be consecutive integers from 0, got {ids}")
    lists = [list(x) for x in by_channel]
    if len(lists) != len(ids) or any(len(x) != 1 for x in lists):
        fail("nkisim_bad_argument", op=op, detail=f"one list of exactly one tensor per channel ({len(ids)} "
             "channel(s))")
    return [x[0] for x in lists]


def collective_permute_implicit(srcs_by_channel, dsts_by_channel, groups, channel_ids) -> None:
    """A ring of one: each rank's successor is itself."""
    check_group(groups, "collective_permute_implicit")
    srcs = _channels(srcs_by_channel, channel_ids, "collective_permute_implicit")
    dsts = _channels(dsts_by_channel, channel_ids, "collective_permute_implicit")
    for s, d in zip(srcs, dsts):
        _copy(s, d, "collective_permute_implicit")


def collective_permute_implicit_reduce(srcs0, srcs1, dsts, groups, op: str, channel_ids) -> None:
    """A ring of one: ``dst = op(src0, src1)`` computed by the DMA engines and sent to the rank itself."""
    name = "collective_permute_implicit_reduce"
    check_group(groups, name)
    if op not in _REDUCE_OPS:
        fail("nkisim_bad_argument", op=name, detail=f"op must be nl.add, nl.minimum or nl.maximum, not {op}")
    a = _channels(srcs0, channel_ids, name)
    b = _channels(srcs1, channel_ids, name)
    d = _channels(dsts, channel_ids, name)
    for x, y, z in zip(a, b, d):
        dma_compute(z, [x, y], op, via=name)


def _check_rmw_form(dst: Tensor, srcs: list[Tensor], via: str) -> None:
    """An indirect (vector_offset) dma_compute is one of the two documented read-modify-write forms, each with
    exactly two sources (nki.isa.dma_compute, NKI 0.6): scatter, ``dst(HBM)[indices] += src(SBUF)`` (one source
    is dst itself), or gather, ``dst(SBUF) += src(HBM)[indices]`` (the other source is dst itself)."""
    if len(srcs) == 2:
        other = srcs[1] if same_view(srcs[0], dst) else srcs[0] if same_view(srcs[1], dst) else None
        if other is not None and dst.kind == B_HBM and other.kind == B_SBUF:
            return
        if other is not None and dst.kind == B_SBUF and other.kind == B_HBM:
            return
    fail("nkisim_bad_argument", op=via, detail="with an indirect (vector_offset) access only the two read-modify-"
         "write forms are supported, each with exactly 2 sources: scatter dst(HBM)[indices] = dst(HBM)[indices] + "
         "src(SBUF), or gather dst(SBUF) = dst(SBUF) + src(HBM)[indices]")


def dma_compute(dst: Tensor, srcs, op: str, scales=None, *, via: str = "dma_compute", oob_skip: bool = False) -> None:
    """``dst = op(srcs[0] * scales[0], srcs[1] * scales[1], ...)`` element-wise in fp32 on the DMA engines, cast to
    dst's dtype (nki.isa.dma_compute: "The DMA engines perform all computations in float32 precision internally").
    One DMA instruction reading every source (its byte count: all of them).  ``oob_skip``
    (``oob_mode=nisa.oob_mode.skip``, NKI 0.4 release notes: "Validation ensures oob_mode.skip is used only with
    indirect indexing"): elements whose indirect index leaves its tensor are not written."""
    ctx = current(via)
    ctx.settle()
    dst = need_tensor(dst, via, "dst")
    srcs = [need_tensor(s, via, "srcs") for s in srcs]
    if not 1 <= len(srcs) <= 16:
        fail("nkisim_bad_argument", op=via, detail=f"1 to 16 source tensors, got {len(srcs)}")
    scales = [1.0] * len(srcs) if scales is None else [float(x) for x in scales]
    if len(scales) != len(srcs):
        fail("nkisim_bad_argument", op=via, detail="scales must have one entry per source tensor")
    n = math.prod(dst.shape)
    for t in srcs + [dst]:
        if t.kind == B_PSUM:
            need_on_chip(t, via, "srcs/dst", (B_HBM, B_SBUF))
        if math.prod(t.shape) != n:
            fail("nkisim_dma_element_mismatch", src=list(t.shape), dst=list(dst.shape))
    check_writable(dst)
    index_tiles: tuple = ()
    keep = None
    for t in srcs + [dst]:
        index_tiles += dynamic_tiles(ctx, t)
        if ctx.full:
            ok = runtime_bounds(ctx, t, skip=oob_skip)  # run-time indices outside the tensor: skipped or a fault (S4)
            if ok is not None:
                ok = np.asarray(ok).reshape(dst.shape)
                keep = ok if keep is None else keep & ok
    if index_tiles:
        _check_rmw_form(dst, srcs, via)
    elif oob_skip:
        fail("nkisim_bad_argument", op=via, detail="oob_mode=skip needs an indirect access (a vector_offset view): "
             "it is only valid with indirect indexing")
    nbytes = sum(math.prod(t.shape) * t.dtype.itemsize for t in srcs)
    ins = ctx.emit("dma_copy", E_DMA, tuple(srcs) + index_tiles, (dst,), {"bytes": nbytes, "via": via, "cast": True})
    # "The only supported DGE mode for read-modify-write (scatter/gather) is SW DGE.  For dma_compute without
    # vector_offset, the only supported DGE mode is None (static DMA)" (nki.isa.dma_compute, NKI 0.6; grading
    # security D6): the indirect form waits for its index tiles and pays software DGE, the direct one is static
    _mark_descriptors(ins.attrs, bool(index_tiles), None if index_tiles else "none")
    if ctx.full:
        acc = None
        for t, sc in zip(srcs, scales):
            v = execute.to_f32(np.asarray(read(t))).astype(np.float32).reshape(dst.shape) * np.float32(sc)
            acc = v if acc is None else execute.alu(op, acc, v)
        write(dst, execute.cast(np.asarray(acc, dtype=np.float32), dst.dtype), keep)
        mark_written(dst, keep)
