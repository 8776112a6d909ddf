"""Calibration kernels, written from the descriptions in measurements.tsv (real NKI API, run on nkisim).

* 2025 course style (trn2): ``skip_middle_end_transformations`` + ``nisa.dma_copy``; knobs ROW_CHUNK / FREE_DIM.
* 2024 course style (trn1): ``nl.load`` / ``nl.add`` / ``nl.store``, no skip decorator; and the direct-allocation
  stream with ``ncc.sbuf.mod_alloc`` buffers rotated across iterations.
* The NKI matrix-multiplication tutorial's fully optimised (blocked, stationary-reuse, large-DMA) bf16 kernel and
  the kernel-optimisation tutorial's fully blocked fp32 kernel (K blocked, partial sums accumulated in SBUF),
  written in the legacy ``neuronxcc.nki`` API.

Knobs are keyword arguments (compile-time Python ints, as ``pool_size`` is in the course harness).
"""

from __future__ import annotations

import neuronxcc.nki as nki
import neuronxcc.nki.compiler as ncc
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


# ---- 2025 (trn2) part-1 kernels -----------------------------------------------------------------------------
@nki.compiler.skip_middle_end_transformations
@nki.jit
def vector_add_tiled_2025(a_vec, b_vec, ROW_CHUNK=1):
    """ROW_CHUNK elements per iteration, one element per partition: two loads, tensor_scalar add, one store."""
    (n,) = a_vec.shape
    out = nl.ndarray(shape=a_vec.shape, dtype=a_vec.dtype, buffer=nl.hbm)
    for i in nl.affine_range(n // ROW_CHUNK):
        lo = i * ROW_CHUNK
        a_tile = nl.ndarray(shape=(ROW_CHUNK, 1), dtype=a_vec.dtype, buffer=nl.sbuf)
        b_tile = nl.ndarray(shape=(ROW_CHUNK, 1), dtype=b_vec.dtype, buffer=nl.sbuf)
        nisa.dma_copy(src=a_vec[lo : lo + ROW_CHUNK], dst=a_tile)
        nisa.dma_copy(src=b_vec[lo : lo + ROW_CHUNK], dst=b_tile)
        res = nisa.tensor_scalar(a_tile, nl.add, b_tile)
        nisa.dma_copy(src=res, dst=out[lo : lo + ROW_CHUNK])
    return out


@nki.compiler.skip_middle_end_transformations
@nki.jit
def vector_add_stream_2025(a_vec, b_vec, FREE_DIM=2):
    """(128, n/128) HBM views streamed in (128, FREE_DIM) tiles: two loads, tensor_tensor add, one store."""
    (n,) = a_vec.shape
    cols = n // 128
    a2 = a_vec.reshape((128, cols))
    b2 = b_vec.reshape((128, cols))
    out = nl.ndarray(shape=(128, cols), dtype=a_vec.dtype, buffer=nl.hbm)
    for t in nl.affine_range(cols // FREE_DIM):
        lo = t * FREE_DIM
        a_tile = nl.ndarray(shape=(128, FREE_DIM), dtype=a_vec.dtype, buffer=nl.sbuf)
        b_tile = nl.ndarray(shape=(128, FREE_DIM), dtype=b_vec.dtype, buffer=nl.sbuf)
        nisa.dma_copy(src=a2[:, lo : lo + FREE_DIM], dst=a_tile)
        nisa.dma_copy(src=b2[:, lo : lo + FREE_DIM], dst=b_tile)
        res = nisa.tensor_tensor(a_tile, b_tile, op=nl.add)
        nisa.dma_copy(src=res, dst=out[:, lo : lo + FREE_DIM])
    return out.reshape(a_vec.shape)


# ---- 2024 (trn1) part-1 kernels -----------------------------------------------------------------------------
@nki.jit
def vector_add_tiled_2024(a_vec, b_vec, ROW_CHUNK=1):
    """2024 starter shape: nl.load into (ROW_CHUNK, 1) tiles, nl.add, nl.store."""
    (n,) = a_vec.shape
    out = nl.ndarray(shape=a_vec.shape, dtype=a_vec.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(n // ROW_CHUNK):
        lo = i * ROW_CHUNK
        a_tile = nl.ndarray(shape=(ROW_CHUNK, 1), dtype=a_vec.dtype, buffer=nl.sbuf)
        b_tile = nl.ndarray(shape=(ROW_CHUNK, 1), dtype=b_vec.dtype, buffer=nl.sbuf)
        a_tile[...] = nl.load(a_vec[lo : lo + ROW_CHUNK])
        b_tile[...] = nl.load(b_vec[lo : lo + ROW_CHUNK])
        res = nl.add(a_tile, b_tile)
        nl.store(out[lo : lo + ROW_CHUNK], value=res)
    return out


@nki.jit
def vector_add_stream_2024(a_vec, b_vec, FREE_DIM=2):
    """2024 starter shape: HBM reshaped to (tiles, 128, FREE_DIM); nl.load, nl.add, nl.store per tile."""
    (n,) = a_vec.shape
    tiles = n // (128 * FREE_DIM)
    a3 = a_vec.reshape((tiles, 128, FREE_DIM))
    b3 = b_vec.reshape((tiles, 128, FREE_DIM))
    out = nl.ndarray(shape=(tiles, 128, FREE_DIM), dtype=a_vec.dtype, buffer=nl.shared_hbm)
    for t in nl.affine_range(tiles):
        a_tile = nl.load(a3[t])
        b_tile = nl.load(b3[t])
        res = nl.add(a_tile, b_tile)
        nl.store(out[t], value=res)
    return out.reshape((n,))


@nki.jit
def vector_add_direct_allocation_2024(a_vec, b_vec, FREE_DIM=1000, BUFS=4):
    """Stream kernel with hand-placed SBUF tiles: BUFS physical buffers per tensor, rotated (mod_alloc)."""
    (n,) = a_vec.shape
    tiles = n // (128 * FREE_DIM)
    a3 = a_vec.reshape((tiles, 128, FREE_DIM))
    b3 = b_vec.reshape((tiles, 128, FREE_DIM))
    out = nl.ndarray(shape=(tiles, 128, FREE_DIM), dtype=a_vec.dtype, buffer=nl.shared_hbm)
    tile_bytes = FREE_DIM * 4
    a_sb = nl.ndarray((tiles, nl.par_dim(128), FREE_DIM), dtype=a_vec.dtype,
                      buffer=ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(BUFS,)))
    b_sb = nl.ndarray((tiles, nl.par_dim(128), FREE_DIM), dtype=a_vec.dtype,
                      buffer=ncc.sbuf.mod_alloc(base_addr=BUFS * tile_bytes, num_free_tiles=(BUFS,)))
    r_sb = nl.ndarray((tiles, nl.par_dim(128), FREE_DIM), dtype=a_vec.dtype,
                      buffer=ncc.sbuf.mod_alloc(base_addr=2 * BUFS * tile_bytes, num_free_tiles=(BUFS,)))
    for t in nl.affine_range(tiles):
        a_sb[t] = nl.load(a3[t])
        b_sb[t] = nl.load(b3[t])
        r_sb[t] = nisa.tensor_tensor(a_sb[t], b_sb[t], op=nl.add)
        nl.store(out[t], value=r_sb[t])
    return out.reshape((n,))


# ---- NKI matrix-multiplication tutorial, fully optimised (bf16, trn1 figures) -------------------------------
@nki.jit
def matmul_fully_optimized(lhsT, rhs, TILES_IN_BLOCK_M=16, TILES_IN_BLOCK_N=2, TILES_IN_BLOCK_K=8):
    """result[M, N] = lhsT.T @ rhs, blocked over M, N and K; partial sums of each K block added into SBUF tiles.

    rhs is loaded as (128, BLOCK_N) tiles once per K block, lhsT as (128, BLOCK_M) tiles per M block; every
    stationary tile is reused for all TILES_IN_BLOCK_N moving tiles.  Results are packed to (128, BLOCK_N) rows
    before the store so each store is one large DMA.
    """
    K, M = lhsT.shape
    _, N = rhs.shape
    TM, TK, TN = 128, 128, 512
    BM, BN, BK = TM * TILES_IN_BLOCK_M, TN * TILES_IN_BLOCK_N, TK * TILES_IN_BLOCK_K
    NBM, NBN, NBK = M // BM, N // BN, K // BK
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for n in nl.affine_range(NBN):
        acc = nl.zeros((NBM, TILES_IN_BLOCK_M, TILES_IN_BLOCK_N, nl.par_dim(TM), TN), dtype=lhsT.dtype,
                       buffer=nl.sbuf)
        for k in nl.sequential_range(NBK):
            rhs_tiles = nl.ndarray((TILES_IN_BLOCK_K, nl.par_dim(TK), BN), dtype=rhs.dtype, buffer=nl.sbuf)
            for bk in nl.affine_range(TILES_IN_BLOCK_K):
                r0 = (TILES_IN_BLOCK_K * k + bk) * TK
                rhs_tiles[bk] = nl.load(rhs[r0 : r0 + TK, BN * n : BN * (n + 1)])
            for m in nl.affine_range(NBM):
                lhs_tiles = nl.ndarray((TILES_IN_BLOCK_K, nl.par_dim(TK), BM), dtype=lhsT.dtype, buffer=nl.sbuf)
                for bk in nl.affine_range(TILES_IN_BLOCK_K):
                    r0 = (TILES_IN_BLOCK_K * k + bk) * TK
                    lhs_tiles[bk] = nl.load(lhsT[r0 : r0 + TK, BM * m : BM * (m + 1)])
                for bn in nl.affine_range(TILES_IN_BLOCK_N):
                    for bm in nl.affine_range(TILES_IN_BLOCK_M):
                        ps = nl.zeros((TM, TN), dtype=nl.float32, buffer=nl.psum)
                        for bk in nl.affine_range(TILES_IN_BLOCK_K):
                            ps += nisa.nc_matmul(lhs_tiles[bk, :, bm * TM : (bm + 1) * TM],
                                                 rhs_tiles[bk, :, bn * TN : (bn + 1) * TN])
                        acc[m, bm, bn] = nl.add(acc[m, bm, bn], ps)
        for m in nl.affine_range(NBM):
            for bm in nl.affine_range(TILES_IN_BLOCK_M):
                packed = nl.ndarray((TM, BN), dtype=acc.dtype, buffer=nl.sbuf)
                for bn in nl.affine_range(TILES_IN_BLOCK_N):
                    packed[:, bn * TN : (bn + 1) * TN] = nl.copy(acc[m, bm, bn])
                row = (TILES_IN_BLOCK_M * m + bm) * TM
                nl.store(result[row : row + TM, BN * n : BN * (n + 1)], value=packed)
        del acc  # dead before the next N block allocates its own (the compiler sees this liveness too)
    return result


# ---- the tutorial's earlier versions (validation rows: trn1 figures quoted with the fully optimised one) -----
@nki.jit
def matmul_tiled(lhsT, rhs):
    """Tutorial v1: for every (m, n) output tile, load both operand tiles for every k, accumulate in PSUM."""
    K, M = lhsT.shape
    _, N = rhs.shape
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // 128):
        for n in nl.affine_range(N // 512):
            ps = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // 128):
                lt = nl.load(lhsT[k * 128 : (k + 1) * 128, m * 128 : (m + 1) * 128])
                rt = nl.load(rhs[k * 128 : (k + 1) * 128, n * 512 : (n + 1) * 512])
                ps += nl.matmul(lt, rt, transpose_x=True)
            nl.store(result[m * 128 : (m + 1) * 128, n * 512 : (n + 1) * 512], value=nl.copy(ps, dtype=result.dtype))
    return result


@nki.jit
def matmul_hoist_load(lhsT, rhs):
    """Tutorial v2: the lhsT column of tiles is loaded once per m, the rhs column once per (m, n)."""
    K, M = lhsT.shape
    _, N = rhs.shape
    KT = K // 128
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // 128):
        lt = nl.ndarray((KT, nl.par_dim(128), 128), dtype=lhsT.dtype, buffer=nl.sbuf)
        for k in nl.affine_range(KT):
            lt[k] = nl.load(lhsT[k * 128 : (k + 1) * 128, m * 128 : (m + 1) * 128])
        for n in nl.affine_range(N // 512):
            rt = nl.ndarray((KT, nl.par_dim(128), 512), dtype=rhs.dtype, buffer=nl.sbuf)
            for k in nl.affine_range(KT):
                rt[k] = nl.load(rhs[k * 128 : (k + 1) * 128, n * 512 : (n + 1) * 512])
            ps = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(KT):
                ps += nl.matmul(lt[k], rt[k], transpose_x=True)
            nl.store(result[m * 128 : (m + 1) * 128, n * 512 : (n + 1) * 512], value=nl.copy(ps, dtype=result.dtype))
            del rt
        del lt
    return result


@nki.jit
def matmul_block_free(lhsT, rhs, TILES_IN_BLOCK_M=2, TILES_IN_BLOCK_N=2):
    """Tutorial v3: blocks of TILES_IN_BLOCK_M lhsT columns and TILES_IN_BLOCK_N rhs columns share loads."""
    K, M = lhsT.shape
    _, N = rhs.shape
    KT = K // 128
    BM, BN = 128 * TILES_IN_BLOCK_M, 512 * TILES_IN_BLOCK_N
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // BM):
        lt = nl.ndarray((TILES_IN_BLOCK_M, KT, nl.par_dim(128), 128), dtype=lhsT.dtype, buffer=nl.sbuf)
        for bm in nl.affine_range(TILES_IN_BLOCK_M):
            for k in nl.affine_range(KT):
                c0 = (m * TILES_IN_BLOCK_M + bm) * 128
                lt[bm, k] = nl.load(lhsT[k * 128 : (k + 1) * 128, c0 : c0 + 128])
        for n in nl.affine_range(N // BN):
            rt = nl.ndarray((TILES_IN_BLOCK_N, KT, nl.par_dim(128), 512), dtype=rhs.dtype, buffer=nl.sbuf)
            for bn in nl.affine_range(TILES_IN_BLOCK_N):
                for k in nl.affine_range(KT):
                    c0 = (n * TILES_IN_BLOCK_N + bn) * 512
                    rt[bn, k] = nl.load(rhs[k * 128 : (k + 1) * 128, c0 : c0 + 512])
            for bm in nl.affine_range(TILES_IN_BLOCK_M):
                for bn in nl.affine_range(TILES_IN_BLOCK_N):
                    ps = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
                    for k in nl.affine_range(KT):
                        ps += nl.matmul(lt[bm, k], rt[bn, k], transpose_x=True)
                    r0 = (m * TILES_IN_BLOCK_M + bm) * 128
                    c0 = (n * TILES_IN_BLOCK_N + bn) * 512
                    nl.store(result[r0 : r0 + 128, c0 : c0 + 512], value=nl.copy(ps, dtype=result.dtype))
            del rt
        del lt
    return result


# ---- NKI kernel-optimisation tutorial, fully blocked fp32 (trn2 figures) ------------------------------------
@nki.jit
def matmul_blocked_fp32(lhsT, rhs, TILES_IN_BLOCK_M=8, TILES_IN_BLOCK_N=2, TILES_IN_BLOCK_K=8):
    """Same blocking as the tutorial's final version, with nisa.* calls: dma_copy blocks, nc_matmul into PSUM,
    tensor_tensor add into zero-initialised SBUF partial-sum tiles, tensor_copy packing, one dma_copy per row.

    TILES_IN_BLOCK_M defaults to 8, not the tutorial's 16: with fp32 inputs the tutorial's blocks (128 KiB of
    partial sums + 64 KiB lhsT + 32 KiB rhs per partition) exceed trn2's usable SBUF."""
    K, M = lhsT.shape
    _, N = rhs.shape
    TM, TK, TN = 128, 128, 512
    BM, BN, BK = TM * TILES_IN_BLOCK_M, TN * TILES_IN_BLOCK_N, TK * TILES_IN_BLOCK_K
    NBM, NBN, NBK = M // BM, N // BN, K // BK
    result = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.hbm)
    for n in nl.affine_range(NBN):
        acc = []
        for _m in range(NBM):
            acc.append([[nisa.memset((TM, TN), 0.0, lhsT.dtype) for _bn in range(TILES_IN_BLOCK_N)]
                        for _bm in range(TILES_IN_BLOCK_M)])
        for k in nl.sequential_range(NBK):
            rhs_tiles = []
            for bk in range(TILES_IN_BLOCK_K):
                r0 = (TILES_IN_BLOCK_K * k + bk) * TK
                t = nl.ndarray((TK, BN), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=t, src=rhs[r0 : r0 + TK, BN * n : BN * (n + 1)])
                rhs_tiles.append(t)
            for m in nl.affine_range(NBM):
                lhs_tiles = []
                for bk in nl.affine_range(TILES_IN_BLOCK_K):
                    r0 = (TILES_IN_BLOCK_K * k + bk) * TK
                    t = nl.ndarray((TK, BM), dtype=lhsT.dtype, buffer=nl.sbuf)
                    nisa.dma_copy(dst=t, src=lhsT[r0 : r0 + TK, BM * m : BM * (m + 1)])
                    lhs_tiles.append(t)
                for bn in nl.affine_range(TILES_IN_BLOCK_N):
                    for bm in nl.affine_range(TILES_IN_BLOCK_M):
                        ps = nl.zeros((TM, TN), dtype=nl.float32, buffer=nl.psum)
                        for bk in nl.affine_range(TILES_IN_BLOCK_K):
                            ps += nisa.nc_matmul(lhs_tiles[bk][:, bm * TM : (bm + 1) * TM],
                                                 rhs_tiles[bk][:, bn * TN : (bn + 1) * TN])
                        tile = acc[m][bm][bn]
                        tile[...] = nisa.tensor_tensor(tile, ps, op=nl.add)
        for m in nl.affine_range(NBM):
            for bm in nl.affine_range(TILES_IN_BLOCK_M):
                packed = nl.ndarray((TM, BN), dtype=nl.float32, buffer=nl.sbuf)
                for bn in nl.affine_range(TILES_IN_BLOCK_N):
                    packed[:, bn * TN : (bn + 1) * TN] = nisa.tensor_copy(acc[m][bm][bn])
                row = (TILES_IN_BLOCK_M * m + bm) * TM
                nisa.dma_copy(dst=result[row : row + TM, BN * n : BN * (n + 1)], src=packed)
        del acc, rhs_tiles, lhs_tiles
    return result


KERNELS = {
    "vector_add_tiled_2025": vector_add_tiled_2025,
    "vector_add_stream_2025": vector_add_stream_2025,
    "vector_add_tiled_2024": vector_add_tiled_2024,
    "vector_add_stream_2024": vector_add_stream_2024,
    "vector_add_direct_allocation_2024": vector_add_direct_allocation_2024,
    "matmul_fully_optimized": matmul_fully_optimized,
    "matmul_blocked_fp32": matmul_blocked_fp32,
    "matmul_tiled": matmul_tiled,
    "matmul_hoist_load": matmul_hoist_load,
    "matmul_block_free": matmul_block_free,
}
