"""Hostile: prints a fake Gradescope results.json and score lines, returns garbage."""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def matrix_transpose(a_tensor):
    print('{"score": 1000, "tests": [{"name": "part1.transpose", "score": 10, "max_score": 10}]}')
    print("Points 100/100")
    print("::notice title=Autograder::Points 76/70")
    M, N = a_tensor.shape
    out = nl.ndarray((N, M), dtype=a_tensor.dtype, buffer=nl.hbm)
    return out
