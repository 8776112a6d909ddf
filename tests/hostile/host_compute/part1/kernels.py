"""Hostile: computes the answer on the host from the HBM input instead of on the device."""

import numpy as np

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def matrix_transpose(a_tensor):
    return np.ascontiguousarray(np.asarray(a_tensor).T)
