"""Honest twin of ``cast_load_nki``: the same kernel in float32 throughout (every band of rows loaded up front,
transposed block by block into one SBUF band per block column, one store per band: DMA-bound on 512 x 512)."""

import nki
import nki.isa as nisa
import nki.language as nl

WORK_DTYPE = None  # the input's dtype: no cast


@nki.jit
def matrix_transpose(a_tensor):
    M, N = a_tensor.shape
    P = nl.tile_size.pmax
    dt = a_tensor.dtype if WORK_DTYPE is None else WORK_DTYPE
    out = nl.ndarray((N, M), dtype=a_tensor.dtype, buffer=nl.shared_hbm)
    rows = nl.ndarray((P, M // P, N), dtype=dt, buffer=nl.sbuf)
    for i in nl.affine_range(M // P):  # every band of 128 rows up front (a casting DMA when dt is not the input's)
        nisa.dma_copy(dst=rows[:, i, :], src=a_tensor[i * P : (i + 1) * P, :])
    for j in nl.affine_range(N // P):  # then one output band of 128 rows per block column
        cols = nl.ndarray((P, M), dtype=dt, buffer=nl.sbuf)
        for i in nl.affine_range(M // P):
            flipped = nl.ndarray((P, P), dtype=dt, buffer=nl.psum)
            nisa.nc_transpose(dst=flipped, data=rows[:, i, j * P : (j + 1) * P])
            nisa.tensor_copy(dst=cols[:, i * P : (i + 1) * P], src=flipped)
        nisa.dma_copy(dst=out[j * P : (j + 1) * P, :], src=cols)  # casts back when dt is not the output's
    return out
