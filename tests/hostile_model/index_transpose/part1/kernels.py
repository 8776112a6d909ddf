"""Model gaming (G11): transposes each 128 x 128 block with one VectorE copy of an index expression whose
partition index runs along the free axis (``nl.copy(tile[i_f, i_p])``), skipping the TensorE transpose and its
PSUM evacuation.

An engine reads a contiguous run of partitions, every partition walking the same free pattern in its own memory
(trainium_inferentia2_arch.rst, "Accessing SBUF/PSUM tensors using compute engines"): no engine instruction moves
element (p, f) to (f, p).  nkisim executed it as a plain copy; it now refuses it (``nkisim_partition_lanes``), as
the hardware cannot run it."""

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def matrix_transpose(a_tensor):
    M, N = a_tensor.shape
    P = nl.tile_size.pmax
    out = nl.ndarray((N, M), dtype=a_tensor.dtype, buffer=nl.hbm)
    i_p = nl.arange(P)[:, None]
    i_f = nl.arange(P)[None, :]
    for i in nl.affine_range(M // P):
        for j in nl.affine_range(N // P):
            tile = nl.load(a_tensor[i * P : (i + 1) * P, j * P : (j + 1) * P])
            flipped = nl.copy(tile[i_f, i_p])
            nl.store(out[j * P : (j + 1) * P, i * P : (i + 1) * P], value=flipped)
    return out
