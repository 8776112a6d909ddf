"""Tiled matmuls in the style of the NKI matrix-multiplication tutorial: lhsT [K, M] x rhs [K, N] -> [M, N].

Two spellings: the 2025 nisa style (nc_matmul into an nl.zeros PSUM tile with +=) and the 2024 nl style
(nl.matmul(transpose_x=True) into an nl.ndarray PSUM tile, evacuated with nl.copy).
"""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def matmul_tiled_nisa(lhsT, rhs):
    K, M = lhsT.shape
    K2, N = rhs.shape
    assert K == K2
    TILE_M = nl.tile_size.gemm_stationary_fmax  # 128
    TILE_K = nl.tile_size.pmax  # 128
    TILE_N = nl.tile_size.gemm_moving_fmax  # 512
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.hbm)
    for m in nl.affine_range(M // TILE_M):
        for n in nl.affine_range(N // TILE_N):
            res_psum = nl.zeros((TILE_M, TILE_N), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TILE_K):
                lhsT_tile = nl.ndarray((TILE_K, TILE_M), dtype=lhsT.dtype, buffer=nl.sbuf)
                rhs_tile = nl.ndarray((TILE_K, TILE_N), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(src=lhsT[k * TILE_K:(k + 1) * TILE_K, m * TILE_M:(m + 1) * TILE_M], dst=lhsT_tile)
                nisa.dma_copy(src=rhs[k * TILE_K:(k + 1) * TILE_K, n * TILE_N:(n + 1) * TILE_N], dst=rhs_tile)
                res_psum += nisa.nc_matmul(lhsT_tile, rhs_tile)
            res_sb = nisa.tensor_copy(res_psum, dtype=result.dtype)
            nisa.dma_copy(src=res_sb, dst=result[m * TILE_M:(m + 1) * TILE_M, n * TILE_N:(n + 1) * TILE_N])
    return result


@nki.jit
def matmul_tiled_nl(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    TILE_M, TILE_K, TILE_N = 128, 128, 512
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TILE_M):
        for n in nl.affine_range(N // TILE_N):
            res_psum = nl.ndarray((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TILE_K):
                lhsT_tile = nl.load(lhsT[k * TILE_K:(k + 1) * TILE_K, m * TILE_M:(m + 1) * TILE_M])
                rhs_tile = nl.load(rhs[k * TILE_K:(k + 1) * TILE_K, n * TILE_N:(n + 1) * TILE_N])
                res_psum += nl.matmul(lhsT_tile, rhs_tile, transpose_x=True)
            res_sb = nl.copy(res_psum, dtype=result.dtype)
            nl.store(result[m * TILE_M:(m + 1) * TILE_M, n * TILE_N:(n + 1) * TILE_N], value=res_sb)
    return result
