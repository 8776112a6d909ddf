"""A collective the hardware does not offer (current API, grading security V5): transposes into a private HBM buffer
and moves it to the output with a one-rank ``ncol.all_gather`` at an LNC=1 launch, which nkisim used to run as a
local DMA copy.  AWS documents the
collectives only for LNC=2 launches with rank-lists of 4 ranks ("Only LNC=2 is supported", "Each rank-list must have
exactly 4 ranks", nki.collectives): the kernel does not compile, no credit."""

import nki
import nki.collectives as ncol
import nki.isa as nisa
import nki.language as nl


@nki.jit
def matrix_transpose(a_tensor):
    M, N = a_tensor.shape
    P = nl.tile_size.pmax
    out = nl.ndarray((N, M), dtype=a_tensor.dtype, buffer=nl.shared_hbm)
    group = ncol.ReplicaGroup([[0]])
    scratch = nl.ndarray((N, M), dtype=a_tensor.dtype, buffer=nl.hbm)
    for i in nl.affine_range(M // P):
        band = nl.ndarray((P, N), dtype=a_tensor.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=band, src=a_tensor[i * P : (i + 1) * P, :])
        for j in nl.affine_range(N // P):
            flipped = nl.ndarray((P, P), dtype=a_tensor.dtype, buffer=nl.psum)
            nisa.nc_transpose(dst=flipped, data=band[:, j * P : (j + 1) * P])
            back = nl.ndarray((P, P), dtype=a_tensor.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=back, src=flipped)
            nisa.dma_copy(dst=scratch[j * P : (j + 1) * P, i * P : (i + 1) * P], src=back)
    ncol.all_gather([scratch], [out], group, collective_dim=0)
    return out
