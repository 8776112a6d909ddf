"""Every kernel call traces the kernel body again, as NKI does: Python state a kernel touches at trace time (AWS's
attention tutorial keeps a module-level SBUF placement offset) advances once per call, and nkisim keeps no trace,
allocator or decorator state of its own across calls."""

from __future__ import annotations

import neuronxcc.nki.language as nl
import numpy as np
from neuronxcc import nki

TRACED: list[int] = []


@nki.jit
def _double(x):
    TRACED.append(len(TRACED))  # runs once per trace
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.add(nl.load(x), nl.load(x)))
    return out


def test_each_call_traces_the_body_again():
    TRACED.clear()
    x = np.arange(128 * 4, dtype=np.float32).reshape(128, 4)
    for i in range(3):
        np.testing.assert_array_equal(nki.simulate_kernel(nki.baremetal(_double), x), 2 * x)
        assert TRACED == list(range(i + 1))
    np.testing.assert_array_equal(_double(x), 2 * x)
    assert len(TRACED) == 4
