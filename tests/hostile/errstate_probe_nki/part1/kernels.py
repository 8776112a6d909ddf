"""Hostile (issue 31, device values): NumPy's floating-point error state set around an instruction.  nkisim computes
an instruction's values with NumPy while the kernel's Python waits, so under ``np.errstate(divide="raise")`` a
reciprocal of a tile raised FloatingPointError into the kernel exactly when the tile held a zero: one bit of device
data per probe, in the kernel's Python (``errstate(call=f)`` calls kernel code instead).  Here the bit decides the
kernel's work (a transpose with the probe, of the sign of every element, in front of it); with a bit per probe a
kernel reads any input it has time for.  The screen passed ``np.errstate`` (``np.seterr`` was refused) and the
grader's NumPy view handed it out.  Closed twice: the screen refuses it (SANDBOX-NUMPY-STATE) and the NumPy view
withholds errstate/seterr/seterrcall.  On Trainium the device raises nothing into the kernel's Python: the transpose
would score, the probe would not compile."""

import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np


@nki.jit
def matrix_transpose(a_tensor):
    M, N = a_tensor.shape
    P = nl.tile_size.pmax
    out = nl.ndarray((N, M), dtype=a_tensor.dtype, buffer=nl.shared_hbm)
    first = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=first, src=a_tensor[0:1, 0:1])
    sign = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=sign, data=first, op0=nl.greater, operand0=0.0)  # 1.0 if a[0, 0] > 0 else 0.0
    probe = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
    positive = True
    with np.errstate(divide="raise"):
        try:
            nisa.activation(dst=probe, op=nl.reciprocal, data=sign)
        except FloatingPointError:
            positive = False  # a device value, in Python
    for i in nl.affine_range(M // P):
        band = nl.ndarray((P, N), dtype=a_tensor.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=band, src=a_tensor[i * P : (i + 1) * P, :])
        for j in nl.affine_range(N // P):
            flipped = nl.ndarray((P, P), dtype=a_tensor.dtype, buffer=nl.psum)
            nisa.nc_transpose(dst=flipped, data=band[:, j * P : (j + 1) * P])
            back = nl.ndarray((P, P), dtype=a_tensor.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=back, src=flipped)
            nisa.dma_copy(dst=out[j * P : (j + 1) * P, i * P : (i + 1) * P], src=back if positive else back)
    return out
