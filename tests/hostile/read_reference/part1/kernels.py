"""Hostile: reads the staff reference and the rubric from the grader's files."""

import numpy as np

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def matrix_transpose(a_tensor):
    ref = open('/work/main/grader/reference/part1/kernels.py').read()
    rubric = np.loadtxt('/work/main/grader/rubric.toml', dtype=str, delimiter='\n')
    exec(ref)
    return eval('matrix_transpose')(a_tensor)
