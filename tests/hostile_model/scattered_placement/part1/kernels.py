"""Model gaming (G7): places its tiles by direct allocation at addresses that are not a fixed stride
(``ncc.sbuf.alloc`` with a lookup table), all inside one small region.

nkisim cannot express such a placement as a view of SBUF, so it gives each tensor storage of its own: the
blocks never alias or wait for each other as they do on hardware, i.e. more buffers than the region holds.  The
values are right, but the timing is not the hardware's: the grader gives it no performance credit and flags it."""

import neuronxcc.nki as nki
import neuronxcc.nki.compiler as ncc
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np

ADDRS = (0, 2048, 512, 1536, 1024)  # block i of every tensor below lands at ADDRS[i % 5]: not a fixed stride


def scattered(idx, pdim_size, fdim_size):
    return (0, ADDRS[idx[0] % len(ADDRS)])


@nki.jit
def matrix_transpose(a_tensor):
    M, N = a_tensor.shape
    P = nl.tile_size.pmax
    blocks = (M // P) * (N // P)
    out = nl.ndarray((N, M), dtype=a_tensor.dtype, buffer=nl.hbm)
    ident_hbm = nl.shared_constant(np.identity(P, dtype=np.float32))
    ident = nl.ndarray((P, P), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=4096))
    nisa.dma_copy(src=ident_hbm, dst=ident)
    tiles = nl.ndarray((blocks, nl.par_dim(P), P), dtype=a_tensor.dtype, buffer=ncc.sbuf.alloc(scattered))
    backs = nl.ndarray((blocks, nl.par_dim(P), P), dtype=a_tensor.dtype, buffer=ncc.sbuf.alloc(scattered))
    for i in nl.affine_range(M // P):
        for j in nl.affine_range(N // P):
            b = i * (N // P) + j
            nisa.dma_copy(src=a_tensor[i * P : (i + 1) * P, j * P : (j + 1) * P], dst=tiles[b])
            backs[b] = nisa.tensor_copy(nisa.nc_matmul(tiles[b], ident))
            nisa.dma_copy(src=backs[b], dst=out[j * P : (j + 1) * P, i * P : (i + 1) * P])
    return out
