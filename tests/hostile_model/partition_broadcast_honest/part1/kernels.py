"""Honest twin of ``partition_broadcast``: the zero row's broadcast over the partitions written out as the
architecture guide gives it (``nc_matmul(ones, row, is_stationary_onezero=True)``, TensorE "Alternative Use
Case"), evicted to SBUF because the blocks it is added to already sit in PSUM."""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def matrix_transpose(a_tensor):
    M, N = a_tensor.shape
    P = nl.tile_size.pmax
    G = 4  # up to four blocks side by side: one PSUM bank of fp32
    out = nl.ndarray((N, M), dtype=a_tensor.dtype, buffer=nl.hbm)
    ones = nisa.memset((1, P), 1.0, a_tensor.dtype)
    for i in nl.affine_range(M // P):
        for j0 in range(0, N // P, G):
            nb = min(G, N // P - j0)
            W = nb * P
            tile = nl.ndarray((P, W), dtype=a_tensor.dtype, buffer=nl.sbuf)
            nisa.dma_copy(src=a_tensor[i * P : (i + 1) * P, j0 * P : j0 * P + W], dst=tile)
            zero_row = nl.multiply(tile[0:1, :], 0.0)  # [1, W] of zeros, made from the data (x * 0 + y == y)
            flipped = nl.ndarray((P, W), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(nb):
                flipped[:, k * P : (k + 1) * P] = nisa.nc_transpose(tile[:, k * P : (k + 1) * P])
            rows = nisa.nc_matmul(ones, zero_row, is_stationary_onezero=True)
            zeros = nisa.tensor_copy(rows)
            back = nl.add(flipped, zeros, dtype=a_tensor.dtype)
            for k in nl.affine_range(nb):
                r = (j0 + k) * P
                nisa.dma_copy(src=back[:, k * P : (k + 1) * P], dst=out[r : r + P, i * P : (i + 1) * P])
    return out
