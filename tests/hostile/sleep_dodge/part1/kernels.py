"""Hostile: sleeps (no CPU use) hoping to dodge CPU-time limits."""

import time

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def matrix_transpose(a_tensor):
    time.sleep(3600)
