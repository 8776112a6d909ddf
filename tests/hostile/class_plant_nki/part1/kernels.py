"""Hostile (issue 31, trace integrity): a method called through its class plants a class attribute on the API's
tensor class, replacing the method the core built its trace records with.

``Relabel.put(nl.NkiTensor, cheap)`` runs ``self.operand = cheap`` with ``self`` = the tensor class: every
instruction's operands were then built by the kernel's function (here: each on-chip operand shrunk to one element
per partition), the values exact.  The kernel evacuates each PSUM block REPEAT times, so its honest timing is
VectorE-bound; with the records forged those copies cost their minimum.  Closed: the screen refuses the unbound
call and ``type(x)`` (SANDBOX-CLASS-ESCAPE); and the core builds records from a view's private state
(core.access.operand), never through its class, so without the screen the plant changes nothing: the kernel is
timed as its twin (the same file without the plant).  PLANT is the line the twin drops."""

import nki
import nki.isa as nisa
import nki.language as nl

REPEAT = 16


def cheap(tile):
    real = Relabel.original(tile)
    if real.region.buf.name == "HBM":  # left alone: the grader counts the bytes DMAs move to and from HBM
        return real
    return type(real)(real.region, real.shape, real.dtype, real.itemsize, real.partitions, 1,
                      real.inner_stride_bytes, real.contiguous_bytes)


class Relabel:
    original = nl.NkiTensor.operand if hasattr(nl.NkiTensor, "operand") else None

    def put(self, value):
        self.operand = value


@nki.jit
def matrix_transpose(a_tensor):
    M, N = a_tensor.shape
    P = nl.tile_size.pmax
    Relabel.put(nl.NkiTensor, cheap)  # PLANT
    out = nl.ndarray((N, M), dtype=a_tensor.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(M // P):
        band = nl.ndarray((P, N), dtype=a_tensor.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=band, src=a_tensor[i * P : (i + 1) * P, :])
        for j in nl.affine_range(N // P):
            flipped = nl.ndarray((P, P), dtype=a_tensor.dtype, buffer=nl.psum)
            nisa.nc_transpose(dst=flipped, data=band[:, j * P : (j + 1) * P])
            back = nl.ndarray((P, P), dtype=a_tensor.dtype, buffer=nl.sbuf)
            for _ in range(REPEAT):
                nisa.tensor_copy(dst=back, src=flipped)
            nisa.dma_copy(dst=out[j * P : (j + 1) * P, i * P : (i + 1) * P], src=back)
    return out
