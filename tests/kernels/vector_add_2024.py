"""Fall 2024 (trn1) style part-1 kernels: nl.load / nl.add / nl.store, block dimensions, direct allocation.

Written for nkisim's tests from the starter's description (shared/nki-api.md section 3.1); not the course file.
"""

import logging

import neuronxcc.nki as nki
import neuronxcc.nki.compiler as ncc
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl

# The 2024 starter does this right after importing nki; it needs logging.OFF, which the real package defines.
logging.disable(logging.OFF)


@nki.jit
def vector_add_naive(a_vec, b_vec):
    out = nl.ndarray(a_vec.shape, dtype=a_vec.dtype, buffer=nl.shared_hbm)
    a = nl.load(a_vec)
    b = nl.load(b_vec)
    res = nl.add(a, b)
    nl.store(out, res)
    return out


@nki.jit
def vector_add_tiled(a_vec, b_vec, row_chunk=128):
    out = nl.ndarray(a_vec.shape, dtype=a_vec.dtype, buffer=nl.shared_hbm)
    M = a_vec.shape[0]
    for m in nl.affine_range(M // row_chunk):
        a_tile = nl.ndarray((row_chunk, 1), dtype=a_vec.dtype, buffer=nl.sbuf)
        b_tile = nl.ndarray((row_chunk, 1), dtype=a_vec.dtype, buffer=nl.sbuf)
        a_tile[...] = nl.load(a_vec[m * row_chunk:(m + 1) * row_chunk])
        b_tile[...] = nl.load(b_vec[m * row_chunk:(m + 1) * row_chunk])
        res = nl.add(a_tile, b_tile)
        nl.store(out[m * row_chunk:(m + 1) * row_chunk], value=res)
    return out


@nki.jit
def vector_add_stream(a_vec, b_vec, free_dim=2):
    M = a_vec.shape[0]
    tile_m = nl.tile_size.pmax * free_dim
    a_re = a_vec.reshape((M // tile_m, nl.tile_size.pmax, free_dim))
    b_re = b_vec.reshape((M // tile_m, nl.tile_size.pmax, free_dim))
    out = nl.ndarray(a_re.shape, dtype=a_vec.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // tile_m):
        a_tile = nl.load(a_re[m])
        b_tile = nl.load(b_re[m])
        res = nl.add(a_tile, b_tile)
        nl.store(out[m], value=res)
    return out.reshape((M,))


FREE_DIM_ALLOC = 1000


def _direct_allocation(a_vec, b_vec, out, spacing):
    """Shared body of the good (spacing = tile bytes) and bad (spacing = 0, all tiles alias) versions."""
    free_dim = FREE_DIM_ALLOC
    n_tiles = 4
    M = a_vec.shape[0]
    tile_m = 128 * free_dim
    a_re = a_vec.reshape((M // tile_m, 128, free_dim))
    b_re = b_vec.reshape((M // tile_m, 128, free_dim))
    tile_bytes = n_tiles * free_dim * 4
    a_tiles = nl.ndarray((M // tile_m, nl.par_dim(128), free_dim), dtype=a_vec.dtype,
                         buffer=ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(n_tiles,)))
    b_tiles = nl.ndarray((M // tile_m, nl.par_dim(128), free_dim), dtype=a_vec.dtype,
                         buffer=ncc.sbuf.mod_alloc(base_addr=spacing * tile_bytes, num_free_tiles=(n_tiles,)))
    r_tiles = nl.ndarray((M // tile_m, nl.par_dim(128), free_dim), dtype=a_vec.dtype,
                         buffer=ncc.sbuf.mod_alloc(base_addr=2 * spacing * tile_bytes, num_free_tiles=(n_tiles,)))
    for m in nl.affine_range(M // tile_m):
        a_tiles[m] = nl.load(a_re[m])
        b_tiles[m] = nl.load(b_re[m])
        r_tiles[m] = nisa.tensor_tensor(a_tiles[m], b_tiles[m], op=nl.add)
        nl.store(out[m], value=r_tiles[m])
    return out.reshape((M, 1))


@nki.jit
def vector_add_direct_allocation(a_vec, b_vec):
    # shared_hbm tensors must be created at the kernel's top level (err_shared_hbm_must_in_kernel_level)
    out = nl.ndarray((a_vec.shape[0] // (128 * FREE_DIM_ALLOC), 128, FREE_DIM_ALLOC), dtype=a_vec.dtype,
                     buffer=nl.shared_hbm)
    return _direct_allocation(a_vec, b_vec, out, spacing=1)


@nki.jit
def vector_add_direct_allocation_bad(a_vec, b_vec):
    out = nl.ndarray((a_vec.shape[0] // (128 * FREE_DIM_ALLOC), 128, FREE_DIM_ALLOC), dtype=a_vec.dtype,
                     buffer=nl.shared_hbm)
    return _direct_allocation(a_vec, b_vec, out, spacing=0)
