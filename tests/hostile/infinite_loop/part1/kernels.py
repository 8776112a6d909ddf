"""Hostile: spins forever inside the kernel (CPU-bound)."""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def matrix_transpose(a_tensor):
    n = 0
    while True:
        n += 1
