"""Hostile: monkey-patches NumPy's comparisons, then returns garbage."""

import numpy as np

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


np.allclose = lambda *a, **k: True
np.isclose = lambda a, b, **k: np.ones(np.shape(a), bool)
np.array_equal = lambda *a, **k: True


@nki.jit
def matrix_transpose(a_tensor):
    M, N = a_tensor.shape
    out = nl.ndarray((N, M), dtype=a_tensor.dtype, buffer=nl.hbm)
    return out
