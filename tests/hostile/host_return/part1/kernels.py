"""Hostile: returns a host NumPy array without running any instruction."""

import numpy as np

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def matrix_transpose(a_tensor):
    M, N = a_tensor.shape
    return np.zeros((N, M), dtype=np.float32)
