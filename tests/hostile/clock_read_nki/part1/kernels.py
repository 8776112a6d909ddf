"""Hostile (issue 31, S8): the kernel reads the wall clock.

The time the emulator takes to execute instructions depends on device values (a data-dependent ``nl.while_loop``
runs as often as a register says) and on whether values are computed at all, so a clock in the kernel's Python is a
side channel of both.  The only clock student code can reach is NumPy's datetime parser ('now', 'today').  This
kernel tries the datetime API by name, then a datetime dtype spelt at run time, and transposes only when it got the
time (so it scores 12 wherever a clock is readable, 0 where none is).  Closed three times: the screen refuses the
spellings it sees (SANDBOX-CLOCK), the grader's NumPy view withholds the datetime API's names, and the child points
NumPy's imports of time() at a clock stopped at the epoch (grader/child.py _stop_numpy_clock)."""

import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np


def wall_clock_year():
    try:
        stamp = np.datetime64("now")
    except AttributeError:  # the module view withholds the datetime API: spell the dtype at run time
        word = "".join(chr(c) for c in (110, 111, 119))
        unit = "".join(chr(c) for c in (77, 56, 91, 115, 93))
        stamp = np.array([word]).astype(unit)[0]
    return int(str(stamp)[:4])


@nki.jit
def matrix_transpose(a_tensor):
    if wall_clock_year() < 2000:
        raise RuntimeError("no wall clock")
    M, N = a_tensor.shape
    P = nl.tile_size.pmax
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
    return out
