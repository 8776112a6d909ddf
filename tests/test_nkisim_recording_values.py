"""The specializing run computes no values (docs/grading-security.md L2): a timing run that writes its program down
(nkisim.stream) is never repeated in full mode when a dynamic loop needs a register's value, as a plain timing run
is; the replay computes the values.  Before, the grader's specializing child ran the kernel's Python a second time
beside the real inputs' values (tests/hostile/values_in_child_nki read them past the screen: 12 points)."""

from __future__ import annotations

import importlib.util
import warnings

import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest
from grader_helpers import HOSTILE

from nkisim import stream
from nkisim.core import context
from nkisim.core.runtime import run_kernel

MODES: list[bool] = []


@nki.jit
def loop_then_copy(x, counts):
    MODES.append(context.current("test").full)
    rows, cols = x.shape
    out = nl.ndarray((rows, cols), dtype=nl.float32, buffer=nl.shared_hbm)
    cnt = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=cnt, src=counts)
    one = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=one, value=1)
    acc = nl.ndarray((rows, cols), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=acc, src=x)
    reg = nisa.register_alloc()
    nisa.register_load(reg, cnt)

    def body(r):
        nisa.tensor_tensor(dst=acc, data1=acc, data2=acc, op=nl.add)
        nisa.tensor_tensor(dst=cnt, data1=cnt, data2=one, op=nl.subtract)
        nisa.register_load(r, cnt)
        return r

    nl.while_loop(reg, body)
    nisa.dma_copy(dst=out, src=acc)  # the output is written after the loop
    return out


@pytest.mark.parametrize("count", [0, 2])
def test_a_recording_run_never_computes_values(count):
    x = np.arange(32, dtype=np.float32).reshape(4, 8)
    counts = np.array([[count]], np.int32)
    MODES.clear()
    data, run = stream.record(loop_then_copy, (x, counts))
    assert MODES == [False] and run.outputs is None  # one run of the kernel's Python, in timing mode
    # a plain timing run still needs the values to cost the loop (it reruns in full mode, outputs withheld)
    MODES.clear()
    assert run_kernel(loop_then_copy, (x, counts), mode="timing").outputs is None and MODES == [False, True]
    replayed = stream.replay(stream.loads(stream.dumps(data)), (x, counts), {})
    direct = run_kernel(loop_then_copy, (x, counts))
    np.testing.assert_array_equal(replayed.outputs, x * 2.0 ** count)
    assert [i.op for i in replayed.trace.instrs] == [i.op for i in direct.trace.instrs]


def test_the_kernels_own_error_after_the_loop_is_its_error():
    @nki.jit
    def fails_after(counts):
        cnt = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=cnt, src=counts)
        reg = nisa.register_alloc()
        nisa.register_load(reg, cnt)
        nl.while_loop(reg, lambda r: r)
        raise ValueError("the kernel's own error")

    with pytest.raises(ValueError, match="the kernel's own error"):
        stream.record(fails_after, (np.zeros((1, 1), np.int32),))


def test_the_hostile_host_answer_does_not_reach_the_replay():
    spec = importlib.util.spec_from_file_location("values_in_child", HOSTILE / "values_in_child_nki/part1/kernels.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    x = np.random.default_rng(1).standard_normal((256, 128)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        data, _ = stream.record(mod.matrix_transpose, (x.copy(),))
    replayed = stream.replay(stream.loads(stream.dumps(data)), (x.copy(),), {})
    # the constant it shipped was made from the timing run's storage, which holds no input values
    assert not np.array_equal(replayed.outputs, x.T)
