"""Hostile (issue 31, values the hardware would not give): ``nl.shared_constant(path)`` reads a file the kernel
does not ship.

The path form loaded any ``.npy`` the grading machine holds (here a file outside the submission,
``/tmp/asst4-hostile-shared_constant.npy``, that the test plants; a grader's cached references or another run's
inputs are what an attacker would name).  On Trainium the file is read when the kernel is compiled and embedded
in the binary: only what the kernel's package ships.  Closed: nkisim reads only a relative ``.npy`` path inside
the kernel file's directory (core.buffers.shipped_constant); under grading that directory is the run's private
work directory, which holds the submitted file alone, so the kernel fails with an error naming the rule."""

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def matrix_transpose(a_tensor):
    M, N = a_tensor.shape
    P = nl.tile_size.pmax
    table = nl.shared_constant("/tmp/asst4-hostile-shared_constant.npy")
    copy = nl.ndarray(table.shape, dtype=table.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=copy, src=table)
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
