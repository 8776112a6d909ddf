"""Hostile: allocates far more host memory than allowed."""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def matrix_transpose(a_tensor):
    hog = []
    while True:
        hog.append(bytearray(1024 * 1024 * 1024))
