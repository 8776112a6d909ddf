"""Hostile (issue 31, capabilities): a kernel parameter's string annotation is Python the static screen never parses
(a string constant), and nkisim's launcher evaluated it whole in the kernel's globals to read ``nt.tensor`` shapes
(core/runtime.py ``_apply_annotations``).  Its assignment expression walks ``().__class__.__base__.__subclasses__()``
to ``warnings.catch_warnings``, whose module holds ``sys``: ``sys.modules`` gives nkisim's storage accessor, left in a
global for the kernel.  The kernel transposes on the host, writes the output's storage, and covers every byte with one
flat HBM -> HBM copy so the trace reads and writes all of them.  Scored 12 of 12 before the fix; closed: a postponed
annotation is evaluated only within the annotation grammar (names, public attributes, subscripts, constants), so
STORAGE is never bound.  On Trainium none of this exists: no credit."""

import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np


@nki.jit
def matrix_transpose(a_tensor: "(STORAGE := [c for c in ().__class__.__base__.__subclasses__() if c.__name__ == 'catch_warnings'][0]()._module.sys.modules['nkisim.core.access'].array)"):  # noqa: E501, F821
    M, N = a_tensor.shape
    answer = STORAGE(a_tensor).T.copy()  # noqa: F821
    out = nl.ndarray((N, M), dtype=a_tensor.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out.reshape((M, N)), src=a_tensor)
    np.copyto(STORAGE(out), answer)  # noqa: F821
    return out
