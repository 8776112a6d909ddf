"""Issue 31, item 5: the score does not rest on the process that runs student code.  For a file of either API on
nkisim, the sandboxed child only specializes the kernel and ships its program (nkisim.stream); a second process
that loads no student code executes that program on the parent's inputs, and the parent judges those outputs and
costs that trace.  Every test runs for the current API and for the legacy one (the staff reference of each).

A compromised child is simulated (tests/fixtures/compromised_child.py started in place of grader/child.py): it
writes the right answer computed on the host and a forged, instruction-free trace, and ships the stream of a cheap
copy.  The verdict follows the stream's real behaviour; with the parent trusting the child (the API left out of
``REPLAYED_APIS``, the closure reverted) the forged answer passes and the forged trace is costed, so these tests
fail."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from grader_helpers import FAST_RUBRIC, ROOT

import grader.runner as runner
from grader import problems
from grader.rubric import load_rubric

COMPROMISED = str(Path(__file__).resolve().parent / "fixtures" / "compromised_child.py")
STAFF = {"nki": (ROOT / "grader" / "reference" / "part1" / "kernels.py").read_bytes(),
         "legacy": (ROOT / "grader" / "reference" / "legacy" / "part1" / "kernels.py").read_bytes()}
APIS = pytest.mark.parametrize("api", ["nki", "legacy"])


def _case(monkeypatch, tmp_path, forge: str | None, *, mode: str = "full", api: str = "nki"):
    """One transpose case of the staff part 1 of ``api`` through runner.run_case; with ``forge``, the compromised
    child runs in place of grader/child.py wherever student code would run (the replay process stays
    grader/child.py)."""
    source = STAFF[api]
    real = runner.run_sandboxed
    seen: list[dict] = []

    def launch(argv, *, stdin_bytes, env_extra=None, **kw):
        job = json.loads(stdin_bytes({}) if callable(stdin_bytes) else stdin_bytes)
        seen.append(job)
        if forge is not None and "stream_file" not in job:
            argv = [*argv[:-1], COMPROMISED]
            env_extra = {**(env_extra or {}), "FORGE": forge}
        return real(argv, stdin_bytes=stdin_bytes, env_extra=env_extra, **kw)

    monkeypatch.setattr(runner, "run_sandboxed", launch)
    rubric = load_rubric(FAST_RUBRIC)
    inv = problems.make_invocation("transpose", {"shape": [256, 384], "dtype": "float32"}, 1)
    scratch = tmp_path / "scratch"
    scratch.mkdir(exist_ok=True)
    run = runner.run_case(source, "part1/kernels.py", "matrix_transpose", inv, mode=mode, want_trace=True,
                          backend="nkisim", target="trn2", limits=rubric.limits, timeout_s=60.0,
                          tmp_root=str(scratch), api=api)
    assert not list(scratch.iterdir()), "run directories must be removed"
    return run, inv, seen


@APIS
def test_an_honest_kernel_is_specialized_in_the_child_and_executed_by_the_parent(monkeypatch, tmp_path, api):
    run, inv, jobs = _case(monkeypatch, tmp_path, None, api=api)
    assert run.verdict == "ok", run.message
    np.testing.assert_array_equal(run.outputs[0], inv.args[0].T)
    assert [j.get("want_stream", False) for j in jobs] == [True, False]
    assert "stream_file" in jobs[1] and jobs[1]["module_path"].endswith(".py")
    assert Path(jobs[1]["module_path"]).name == "kernels.py"  # the name only: the replay's work dir holds no code
    assert jobs[0]["mode"] == "timing"  # the child computes no values
    assert any(i.op == "nc_transpose" for i in run.trace.instrs)


@APIS
def test_a_compromised_child_gains_nothing_from_forged_outputs_and_trace(monkeypatch, tmp_path, api):
    run, inv, _ = _case(monkeypatch, tmp_path, "stream", api=api)
    assert run.verdict == "ok", run.message
    # the outputs are what the shipped program computes (the input's bytes), not the forged answer
    np.testing.assert_array_equal(run.outputs[0], inv.args[0].reshape(384, 256))
    assert not np.array_equal(run.outputs[0], inv.args[0].T)
    # and the trace costed is that program's own (one DMA), not the child's empty one
    assert [i.op for i in run.trace.instrs] == ["dma_copy"]


@APIS
def test_a_compromised_child_timed_gets_the_latency_of_the_program_it_shipped(monkeypatch, tmp_path, api):
    from nkisim.perf import estimate

    run, inv, _ = _case(monkeypatch, tmp_path, "stream", mode="timing", api=api)
    assert run.verdict == "ok", run.message
    assert run.outputs == []
    assert estimate(run.trace, "trn2").nc_latency_us > 0  # the forged trace has no instruction: 0 us


@APIS
def test_a_malformed_stream_is_the_tests_error_not_the_graders(monkeypatch, tmp_path, api):
    run, _, _ = _case(monkeypatch, tmp_path, "garbage", api=api)
    assert run.verdict == "error"
    assert "instruction stream was refused" in run.message and "not valid JSON" in run.message, run.message
    assert run.outputs == []


@APIS
def test_a_stream_of_the_other_api_is_refused(monkeypatch, tmp_path, api):
    """The program replayed is one the graded file's API makes (docs/grading-security.md L5): a compromised child
    shipping the other front end's program (timed against the other API's rules) is refused."""
    run, _, _ = _case(monkeypatch, tmp_path, "otherapi", api=api)
    assert run.verdict == "error"
    assert "instruction stream was refused" in run.message and "but the graded file uses the" in run.message, \
        run.message
