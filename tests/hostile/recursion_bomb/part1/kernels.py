"""Hostile: unbounded recursion."""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl



def matrix_transpose(a_tensor):
    return matrix_transpose(a_tensor)
