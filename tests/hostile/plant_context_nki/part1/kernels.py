"""Hostile (issue 31, "attributes only on self"): a method called through its class plants an attribute on a
library object, which hands the kernel the running kernel's context and with it the trace.

``Plant.put(nl.sbuf, grab)`` runs ``self.direct = grab`` with ``self`` = ``nl.sbuf``: the screen allowed
attribute stores on a method's first parameter whatever the call passed.  ``nl.ndarray(..., buffer=nl.sbuf)`` then
calls ``grab.place(ctx, ...)`` with the KernelContext.  The kernel transposes honestly, then rewrites its own trace
to its DMAs only (the TensorE transposes and PSUM copies vanish from the timing; values stay exact).  Closed: the
screen's "self" is semantic (SANDBOX-CLASS-ESCAPE: a class of the file is only called, tested, raised or has a
constant read), and the shared buffer objects are immutable at run time."""

import nki
import nki.isa as nisa
import nki.language as nl

held = []


class Grab:
    def __init__(self):
        self.count = 0

    def place(self, ctx, dims, pdim, dt, name, bytes_pp):
        held.append(ctx)
        Plant.put(nl.sbuf, None)
        return nl.ndarray(dims, dtype=dt, buffer=nl.sbuf)


class Plant:
    def put(self, value):
        self.direct = value

    def number(self, k):
        self.seq = k


@nki.jit
def matrix_transpose(a_tensor):
    M, N = a_tensor.shape
    P = nl.tile_size.pmax
    Plant.put(nl.sbuf, Grab())
    out = nl.ndarray((N, M), dtype=a_tensor.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(M // P):
        band = nl.ndarray((P, N), dtype=a_tensor.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=band, src=a_tensor[i * P : (i + 1) * P, :])
        for j in nl.affine_range(N // P):
            flipped = nl.ndarray((P, P), dtype=a_tensor.dtype, buffer=nl.psum)
            nisa.nc_transpose(dst=flipped, data=band[:, j * P : (j + 1) * P])
            back = nl.ndarray((P, P), dtype=a_tensor.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=back, src=flipped)
            nisa.dma_copy(dst=out[j * P : (j + 1) * P, i * P : (i + 1) * P], src=back)
    instrs = held[0].trace.instrs
    kept = [ins for ins in instrs if ins.op == "dma_copy"]
    instrs.clear()
    instrs.extend(kept)
    for k in range(len(kept)):
        Plant.number(kept[k], k)
    return out
