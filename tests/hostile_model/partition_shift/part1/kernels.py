"""Model gaming (G10): realigns rows across partitions with VectorE copies (``tile[0:100] = tensor_copy(
rot[28:128])``) where the hardware needs a DMA or a TensorE matmul.

Each 128x128 block arrives with its rows rotated by 28 partitions (as a kernel that reuses a band loaded at a row
offset would hold it), and two VectorE copies put the rows back in place before the TensorE transpose: one
VectorE instruction each instead of a DMA or a matmul plus its PSUM eviction.  The engines cannot do this: an
operand of more than 64 partitions must start at partition 0, and cross-partition moves exist only between
quadrant (P <= 32) or half (P <= 64) boundaries (trainium_inferentia2_arch.rst, "Accessing SBUF/PSUM tensors using
compute engines", "Cross-Partition Connectivity").  On Trainium the kernel does not compile (no credit), and nkisim
now rejects it the same way."""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def matrix_transpose(a_tensor):
    M, N = a_tensor.shape
    P = nl.tile_size.pmax
    S = 28  # the rotation, in partitions
    out = nl.ndarray((N, M), dtype=a_tensor.dtype, buffer=nl.hbm)
    for i in nl.affine_range(M // P):
        for j in nl.affine_range(N // P):
            rot = nl.ndarray((P, P), dtype=a_tensor.dtype, buffer=nl.sbuf)
            nisa.dma_copy(src=a_tensor[i * P : (i + 1) * P - S, j * P : (j + 1) * P], dst=rot[S:P, :])
            nisa.dma_copy(src=a_tensor[(i + 1) * P - S : (i + 1) * P, j * P : (j + 1) * P], dst=rot[0:S, :])
            tile = nl.ndarray((P, P), dtype=a_tensor.dtype, buffer=nl.sbuf)
            tile[0 : P - S, :] = nisa.tensor_copy(rot[S:P, :], engine=nisa.vector_engine)
            tile[P - S : P, :] = nisa.tensor_copy(rot[0:S, :], engine=nisa.vector_engine)
            back = nisa.tensor_copy(nisa.nc_transpose(tile), engine=nisa.vector_engine)
            nisa.dma_copy(src=back, dst=out[j * P : (j + 1) * P, i * P : (i + 1) * P])
    return out
