"""Hostile (issue 31, screen): a module alias rebound to another object is still read as the module.

``nl`` names ``nki.language`` at the top of the file; inside ``patch`` it names NumPy's process-wide type table.
The screen resolved ``nl.update(...)`` as a function of the NKI module (``nl.add`` is not a list's ``add``) and let
the mutation of shared state through; ``nl = array; nl.tofile(...)`` passed its file-I/O check the same way.
Closed: an import alias bound any other way anywhere in the file is no longer taken for the module by the
screen's lenient checks (ModuleFacts.module_path); the strict ones still count it as one: SANDBOX-MONKEYPATCH."""

import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np


def patch(table):
    nl = table
    nl.update({"asst4_hostile": np.float32})


@nki.jit
def matrix_transpose(a_tensor):
    M, N = a_tensor.shape
    P = nl.tile_size.pmax
    patch(np.sctypeDict)
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
