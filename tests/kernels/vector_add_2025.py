"""Fall 2025 (trn2) style part-1 kernels: nisa.dma_copy / tensor_scalar / tensor_tensor / nc_transpose.

Written for nkisim's tests from the starter's description (shared/nki-api.md section 3.2 and the calibration
table's structure column); not the course file.
"""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.compiler.skip_middle_end_transformations
@nki.jit
def vector_add_naive(a_vec, b_vec):
    out = nl.ndarray(a_vec.shape, dtype=a_vec.dtype, buffer=nl.hbm)
    n = a_vec.shape[0]
    a_sbuf = nl.ndarray((n, 1), dtype=a_vec.dtype, buffer=nl.sbuf)
    b_sbuf = nl.ndarray((n, 1), dtype=b_vec.dtype, buffer=nl.sbuf)
    nisa.dma_copy(src=a_vec, dst=a_sbuf)
    nisa.dma_copy(src=b_vec, dst=b_sbuf)
    res = nisa.tensor_scalar(a_sbuf, nl.add, b_sbuf)
    nisa.dma_copy(src=res, dst=out)
    return out


@nki.compiler.skip_middle_end_transformations
@nki.jit
def vector_add_tiled(a_vec, b_vec, row_chunk=128):
    out = nl.ndarray(a_vec.shape, dtype=a_vec.dtype, buffer=nl.hbm)
    M = a_vec.shape[0]
    for m in nl.affine_range(M // row_chunk):
        a_tile = nl.ndarray((row_chunk, 1), dtype=a_vec.dtype, buffer=nl.sbuf)
        b_tile = nl.ndarray((row_chunk, 1), dtype=a_vec.dtype, buffer=nl.sbuf)
        nisa.dma_copy(src=a_vec[m * row_chunk:(m + 1) * row_chunk], dst=a_tile)
        nisa.dma_copy(src=b_vec[m * row_chunk:(m + 1) * row_chunk], dst=b_tile)
        res = nisa.tensor_scalar(a_tile, nl.add, b_tile)
        nisa.dma_copy(src=res, dst=out[m * row_chunk:(m + 1) * row_chunk])
    return out


@nki.compiler.skip_middle_end_transformations
@nki.jit
def vector_add_stream(a_vec, b_vec, free_dim=2):
    M = a_vec.shape[0]
    pmax = nl.tile_size.pmax
    a_2d = a_vec.reshape((pmax, M // pmax))
    b_2d = b_vec.reshape((pmax, M // pmax))
    out = nl.ndarray((pmax, M // pmax), dtype=a_vec.dtype, buffer=nl.hbm)
    for m in nl.affine_range(M // (pmax * free_dim)):
        a_tile = nl.ndarray((pmax, free_dim), dtype=a_vec.dtype, buffer=nl.sbuf)
        b_tile = nl.ndarray((pmax, free_dim), dtype=a_vec.dtype, buffer=nl.sbuf)
        nisa.dma_copy(src=a_2d[:, m * free_dim:(m + 1) * free_dim], dst=a_tile)
        nisa.dma_copy(src=b_2d[:, m * free_dim:(m + 1) * free_dim], dst=b_tile)
        res = nisa.tensor_tensor(a_tile, b_tile, op=nl.add)
        nisa.dma_copy(src=res, dst=out[:, m * free_dim:(m + 1) * free_dim])
    return out.reshape(a_vec.shape)


@nki.compiler.skip_middle_end_transformations
@nki.jit
def matrix_transpose(a):
    M, N = a.shape
    out = nl.ndarray((N, M), dtype=a.dtype, buffer=nl.hbm)
    pmax = nl.tile_size.pmax
    for i in nl.affine_range(M // pmax):
        for j in nl.affine_range(N // pmax):
            tile = nl.ndarray((pmax, pmax), dtype=a.dtype, buffer=nl.sbuf)
            nisa.dma_copy(src=a[i * pmax:(i + 1) * pmax, j * pmax:(j + 1) * pmax], dst=tile)
            t_psum = nisa.nc_transpose(tile)
            t_sbuf = nisa.tensor_copy(t_psum)
            nisa.dma_copy(src=t_sbuf, dst=out[j * pmax:(j + 1) * pmax, i * pmax:(i + 1) * pmax])
    return out
