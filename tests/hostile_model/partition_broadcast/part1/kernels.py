"""Model gaming (G6): evacuates each group of four transposed blocks from PSUM by adding a [1, 512] zero row,
``nl.add(blocks, zero_row)``.

The row is broadcast over the 128 partitions, which no engine can read (no partition striding): the compiler
broadcasts it with a TensorE matmul against a ones vector and evicts it from PSUM (the blocks already sit there),
before the add.  nkisim used to run the add as one VectorE instruction reading the row with a stride-0 partition
axis, so the broadcast was free.  Its twin ``partition_broadcast_honest`` writes the matmul and the eviction out.
Both must score the same."""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def matrix_transpose(a_tensor):
    M, N = a_tensor.shape
    P = nl.tile_size.pmax
    G = 4  # up to four blocks side by side: one PSUM bank of fp32
    out = nl.ndarray((N, M), dtype=a_tensor.dtype, buffer=nl.hbm)
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
            back = nl.add(flipped, zero_row, dtype=a_tensor.dtype)
            for k in nl.affine_range(nb):
                r = (j0 + k) * P
                nisa.dma_copy(src=back[:, k * P : (k + 1) * P], dst=out[r : r + P, i * P : (i + 1) * P])
    return out
