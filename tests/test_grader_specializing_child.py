"""The specializing child never holds input data (docs/grading-security.md L3): it runs the kernel's Python in
timing mode, so it is given zero-filled stand-ins of the inputs' shapes and dtypes, never the parent's arrays.
Before, it loaded the real inputs, and a kernel past the screen found them by walking frames from an exception's
traceback (tests/hostile/inputs_in_child_nki: 12 points with the screen off)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from grader_helpers import FAST_RUBRIC, HOSTILE

import grader.runner as runner
from grader.problems.base import Invocation
from grader.rubric import load_rubric


@pytest.fixture(scope="module")
def limits():
    return load_rubric(FAST_RUBRIC).limits


def _transpose_call(x: np.ndarray) -> Invocation:
    return Invocation(args=[x], kwargs={}, out_shape=(x.shape[1], x.shape[0]), out_dtype=x.dtype, flops=0.0)


def test_the_specializing_child_gets_shapes_not_data(limits, tmp_path, monkeypatch):
    jobs: list = []
    real = runner.run_sandboxed

    def launch(argv, *, stdin_bytes, **kw):
        jobs.append(json.loads(stdin_bytes({}) if callable(stdin_bytes) else stdin_bytes))
        return real(argv, stdin_bytes=stdin_bytes, **kw)

    monkeypatch.setattr(runner, "run_sandboxed", launch)
    x = np.random.default_rng(3).standard_normal((256, 128)).astype(np.float32)
    source = (HOSTILE / "inputs_in_child_nki" / "part1" / "kernels.py").read_bytes()
    run = runner.run_case(source, "part1/kernels.py", "matrix_transpose", _transpose_call(x), mode="full",
                          want_trace=False, backend="nkisim", target="trn2", limits=limits, timeout_s=60.0,
                          tmp_root=str(tmp_path), api="nki")
    spec, replay = jobs
    assert spec.get("want_stream") and spec["inputs"] == [] and spec["input_specs"] == [[[256, 128], "<f4"]]
    assert not replay.get("want_stream") and len(replay["inputs"]) == 1 and "input_specs" not in replay
    # the frame walk found the stand-in: the constant it shipped is zeros, not the host transpose
    assert run.verdict == "ok", run.message
    np.testing.assert_array_equal(run.outputs[0], np.zeros((128, 256), np.float32))


def test_the_specializing_child_loses_the_gradings_input_files(limits, tmp_path, monkeypatch):
    """The grading's shared input files (one per read-only array, KernelServers.input_file) are masked for a
    specializing child: their paths may be in the warm server's memory, which the child's fork inherits, so a child
    past the screen could otherwise read the real inputs from disk.  The replay, which needs them, keeps them."""
    masks: list = []
    real = runner._masked_dirs

    def record(hidden=(), run_root=None):
        got = real(hidden, run_root)
        masks.append(got)
        return got

    monkeypatch.setattr(runner, "_masked_dirs", record)
    servers = runner.KernelServers(target="trn2", limits=limits, tmp_root=str(tmp_path))
    try:
        x = np.random.default_rng(3).standard_normal((256, 128)).astype(np.float32)
        x.flags.writeable = False  # a shared input: written once per grading into the servers' directory
        shared = servers.input_file(x)
        source = (HOSTILE / "inputs_in_child_nki" / "part1" / "kernels.py").read_bytes()
        run = runner.run_case(source, "part1/kernels.py", "matrix_transpose", _transpose_call(x), mode="full",
                              want_trace=False, backend="nkisim", target="trn2", limits=limits, timeout_s=60.0,
                              tmp_root=str(tmp_path), api="nki", servers=servers)
        assert run.verdict == "ok", run.message
        inputs_dir = str(Path(shared).parent.resolve())
        spec_mask, replay_mask = masks
        assert inputs_dir in spec_mask and inputs_dir not in replay_mask
    finally:
        servers.close()


def test_stand_ins_keep_shape_and_dtype():
    import ml_dtypes

    from grader import child

    arrays = [np.ones((2, 3), np.float16), np.ones((4,), np.int32), np.ones((2, 2), ml_dtypes.bfloat16)]
    made = child._stand_ins([[list(a.shape), runner._dtype_spec(a.dtype)] for a in arrays])
    for a, m in zip(arrays, made, strict=True):
        assert m.shape == a.shape and m.dtype == a.dtype and not m.any()


def test_the_specializing_child_frees_nothing_of_its_recording_before_it_exits(tmp_path, monkeypatch):
    """``_specialize`` hands the recorder and the run back for ``run_job`` to hold until ``os._exit``: freeing a
    batch-4 224x224 recording's objects cost 30-48 ms of CPU before the child could write its status (docs/grading.md,
    "round 12, spec2").  Before, the recorder was freed as ``_specialize`` returned.  The stream is written all the
    same."""
    import importlib.util
    import weakref

    from nkisim import stream

    spec = importlib.util.spec_from_file_location("grader_child_under_test", Path(runner.__file__).parent / "child.py")
    child = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(child)
    made: list = []

    class Spy(stream.Recorder):
        def __init__(self) -> None:
            super().__init__()
            made.append(weakref.ref(self))

    monkeypatch.setattr(stream, "Recorder", Spy)
    kernel = runner_kernel()
    kept = child._specialize(kernel, [np.zeros((256, 128), np.float32)], {}, "trn2", str(tmp_path))
    assert made and made[0]() is not None and made[0]() is kept[0]  # None before: freed on the way out
    shipped = stream.loads((tmp_path / "stream.json").read_bytes())
    assert shipped["events"] and shipped["frontend"] == "nki"


def runner_kernel():
    """The staff transpose of part 1 (current API), loaded from its file."""
    import importlib.util

    root = Path(runner.__file__).resolve().parent
    spec = importlib.util.spec_from_file_location("spec2_staff_transpose", root / "reference" / "part1" / "kernels.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.matrix_transpose


def test_a_replaying_child_keeps_its_decoded_stream_and_run_for_the_exit(tmp_path):
    """``_replay`` hands its decoded stream and run to the caller's ``keep`` (``run_job`` holds them until
    ``os._exit``), as ``_specialize`` hands its recording: before, they were freed one object at a time as
    ``_replay`` returned, before the child wrote its status.  The values are the run's all the same."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("grader_child_replay_under_test",
                                                  Path(runner.__file__).parent / "child.py")
    child = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(child)
    x = np.arange(256 * 128, dtype=np.float32).reshape(256, 128)
    child._specialize(runner_kernel(), [np.zeros_like(x)], {}, "trn2", str(tmp_path))
    keep: list = []
    outputs, trace = child._replay(str(tmp_path / "stream.json"), [x], {}, "full", "trn2", "nki", keep=keep)
    assert len(keep) == 1
    decoded, run = keep[0]
    assert decoded["events"] and run.outputs is outputs and run.trace is trace
    got = outputs[0] if isinstance(outputs, (list, tuple)) else outputs
    np.testing.assert_array_equal(np.asarray(got), x.T)
