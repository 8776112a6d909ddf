# STAFF-ONLY: complete part-1 solutions (calibration corpus); excluded from the student release.
"""Student-style ``matrix_transpose(a)`` kernels for part 1: (M, N) float32 -> (N, M), M and N multiples of 128.

* ``matrix_transpose_tiles`` (seeds/004 Part 1 step 3, trn2 86 us at 1024x1024): for every 128x128 tile a DMA
  load, a TensorE ``nc_transpose`` to PSUM, a ``tensor_copy`` back to SBUF and a DMA store to the mirrored
  position; tiles allocated inside the loop (2025 style, ``dma_copy``, skip decorator).
* ``matrix_transpose_naive``: 2024 style (``nl.load``/``nl.store``), one tile at a time with the SBUF and PSUM
  tiles allocated once outside the loops and overwritten in place, ``sequential_range`` loops (the version
  written before thinking about overlap).
* ``matrix_transpose_blocked``: several tiles per DMA.  Column strip j of ``a`` (all M rows, 128 columns)
  arrives with one ``nl.load`` (index grid ``a[i*128 + p, j*128 + c]``) as a (128, M/128, 128) tile; its M/128
  tiles are transposed four at a time into one PSUM bank (4 x 128 fp32 = 2 KiB) and copied into a (128, M)
  SBUF strip, which is row strip j of the result: one contiguous store.
* ``matrix_transpose_identity``: transposes as matmuls against an identity built on-chip (``iota`` of
  ``p - f`` compared with 0): ``nc_matmul(tile, identity) = tile.T @ I``; row strips of ``a`` loaded with one
  DMA each, one store per tile.
"""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.compiler.skip_middle_end_transformations
@nki.jit
def matrix_transpose_tiles(a):
    M, N = a.shape
    P = nl.tile_size.pmax
    out = nl.ndarray((N, M), dtype=a.dtype, buffer=nl.hbm)
    for i in nl.affine_range(M // P):
        for j in nl.affine_range(N // P):
            tile = nl.ndarray((P, P), dtype=a.dtype, buffer=nl.sbuf)
            nisa.dma_copy(src=a[i * P:(i + 1) * P, j * P:(j + 1) * P], dst=tile)
            t_psum = nisa.nc_transpose(tile)
            t_sbuf = nisa.tensor_copy(t_psum)
            nisa.dma_copy(src=t_sbuf, dst=out[j * P:(j + 1) * P, i * P:(i + 1) * P])
    return out


@nki.jit
def matrix_transpose_naive(a):
    M, N = a.shape
    P = nl.tile_size.pmax
    out = nl.ndarray((N, M), dtype=a.dtype, buffer=nl.shared_hbm)
    tile = nl.ndarray((P, P), dtype=a.dtype, buffer=nl.sbuf)
    t_psum = nl.ndarray((P, P), dtype=a.dtype, buffer=nl.psum)
    t_sbuf = nl.ndarray((P, P), dtype=a.dtype, buffer=nl.sbuf)
    for i in nl.sequential_range(M // P):
        for j in nl.sequential_range(N // P):
            tile[...] = nl.load(a[i * P:(i + 1) * P, j * P:(j + 1) * P])
            t_psum[...] = nisa.nc_transpose(tile)
            t_sbuf[...] = nl.copy(t_psum)
            nl.store(out[j * P:(j + 1) * P, i * P:(i + 1) * P], value=t_sbuf)
    return out


@nki.compiler.skip_middle_end_transformations
@nki.jit
def matrix_transpose_blocked(a):
    M, N = a.shape
    P = nl.tile_size.pmax
    per_bank = 4  # 4 x 128 fp32 per partition = one 2 KiB PSUM bank
    m_tiles = M // P
    out = nl.ndarray((N, M), dtype=a.dtype, buffer=nl.hbm)
    i_p = nl.arange(P)[:, None, None]
    i_t = nl.arange(m_tiles)[None, :, None]
    i_f = nl.arange(P)[None, None, :]
    for j in nl.affine_range(N // P):
        # column strip j, one DMA: strip[p, i, c] = a[i*128 + p, j*128 + c]
        strip = nl.load(a[i_t * P + i_p, j * P + i_f])
        out_strip = nl.ndarray((P, M), dtype=a.dtype, buffer=nl.sbuf)
        for g in nl.affine_range(m_tiles // per_bank):
            t_psum = nl.ndarray((P, per_bank, P), dtype=a.dtype, buffer=nl.psum)
            for k in nl.affine_range(per_bank):
                t_psum[:, k, :] = nisa.nc_transpose(strip[:, g * per_bank + k, :])
            out_strip[:, g * per_bank * P:(g + 1) * per_bank * P] = nisa.tensor_copy(
                t_psum.reshape((P, per_bank * P)))
        nisa.dma_copy(src=out_strip, dst=out[j * P:(j + 1) * P, :])
    return out


@nki.compiler.skip_middle_end_transformations
@nki.jit
def matrix_transpose_identity(a):
    M, N = a.shape
    P = nl.tile_size.pmax
    out = nl.ndarray((N, M), dtype=a.dtype, buffer=nl.hbm)
    i_p = nl.arange(P)[:, None]
    i_f = nl.arange(P)[None, :]
    diff = nisa.iota(i_p - i_f, dtype=nl.float32)
    identity = nisa.tensor_scalar(diff, nl.equal, 0.0, dtype=a.dtype)
    for i in nl.affine_range(M // P):
        row_strip = nl.ndarray((P, N), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(src=a[i * P:(i + 1) * P, :], dst=row_strip)
        for j in nl.affine_range(N // P):
            t_psum = nisa.nc_matmul(row_strip[:, j * P:(j + 1) * P], identity)
            t_sbuf = nisa.tensor_copy(t_psum, dtype=a.dtype)
            nisa.dma_copy(src=t_sbuf, dst=out[j * P:(j + 1) * P, i * P:(i + 1) * P])
    return out
