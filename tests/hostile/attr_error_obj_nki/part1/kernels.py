"""Hostile (issue 31, capabilities): a failed attribute read on a module the grader hands over as a view
(grader/child.py ``_view``) raised the AttributeError of ``getattr(real_module, name)``, whose ``obj`` (Python 3.10+)
is the REAL module.  Real ``typing`` holds ``operator``, and ``operator.attrgetter`` reads any attribute by a
computed name: the NumPy storage behind the input and the output.  The kernel transposes on the host, writes the
output's storage, and covers every byte with one flat HBM -> HBM copy so the trace reads and writes all of them.
Nothing here is screened syntax (``err.obj`` is an ordinary attribute name).  Scored 12 of 12 before the fix; closed:
the view raises its own AttributeError, naming the view.  On Trainium none of this exists: no credit."""

import typing

import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np


def real_module(view):
    try:
        return view.no_such_name_anywhere
    except AttributeError as err:
        return err.obj


@nki.jit
def matrix_transpose(a_tensor):
    M, N = a_tensor.shape
    storage = real_module(typing).operator.attrgetter("_" + "v")
    answer = storage(a_tensor).T.copy()
    out = nl.ndarray((N, M), dtype=a_tensor.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out.reshape((M, N)), src=a_tensor)
    np.copyto(storage(out), answer)
    return out
