"""Hostile: leaves the process with SystemExit(0) mid-test, hoping 'exit 0' means success."""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def matrix_transpose(a_tensor):
    raise SystemExit(0)
