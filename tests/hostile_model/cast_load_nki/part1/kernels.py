"""Model gaming (D1): the kernel of ``cast_load_honest_nki`` with its loads cast to float16 by the DMA
(``dma_copy`` from the fp32 input into fp16 SBUF tiles), transposed in fp16 and cast back to fp32 by the stores.

nkisim charged a casting DMA for its destination's bytes, so the fp32 -> fp16 loads moved at half their HBM
reads.  What a casting DMA costs on Trainium is not documented ("Cost not given", DMA guide); nkisim now charges
the larger side, so the cast buys no DMA time.  On the course's float32 tolerance the fp16 values fail
correctness, as they would on hardware; where a looser tolerance lets them pass, the kernel is never timed faster
than its float32 twin (its cheaper fp16 TensorE and PSUM copies are hidden behind the DMAs)."""

import nki
import nki.isa as nisa
import nki.language as nl

WORK_DTYPE = nl.float16  # the loads cast fp32 -> fp16, the stores fp16 -> fp32


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
