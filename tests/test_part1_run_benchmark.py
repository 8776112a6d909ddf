"""part1/run_benchmark.py: the course's command line, its printed lines, exit codes and profile files."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "part1" / "run_benchmark.py"

CORRECTNESS = re.compile(r"^Correctness passed\? (True|False)$", re.M)
LATENCY = re.compile(r"^Execution Time: ([0-9]+\.[0-9]+) \u03bcs \(p99 of 10 iterations, (.+)\)$", re.M)
BACKEND = re.compile(r"^Backend: (Trainium \(.+\)|nkisim estimate, trn[12]) \[(.+)\]$", re.M)
PROFILED = re.compile(r"^Profiled run: ([0-9]+\.[0-9]+) \u03bcs \(p99 of 10 iterations, compiled with DGE off, as the "
                      r"course's profiles are; not scored: the ordinary run took ([0-9]+\.[0-9]+) \u03bcs\)$", re.M)


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], cwd=cwd, capture_output=True, text=True, timeout=300, encoding="utf-8"
    )


@pytest.mark.parametrize("cwd", [REPO, REPO / "part1"], ids=["repo-root", "part1"])
def test_stream_prints_correctness_latency_and_backend(cwd):
    proc = run(["--kernel", "stream", "-n", "25600"], cwd)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "vector_add_stream" in out and "(25600,)" in out
    assert CORRECTNESS.search(out).group(1) == "True"
    latency = LATENCY.search(out)
    assert latency is not None, out
    assert float(latency.group(1)) > 0
    backend = BACKEND.search(out)
    assert backend.group(1) == latency.group(2) == "nkisim estimate, trn2"
    assert re.fullmatch(r"nkisim [0-9.]+", backend.group(2))  # every output names the tool version
    assert "Profiled run" not in out  # no profile asked: one latency, the ordinary one


def test_target_override_is_reported(monkeypatch):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn1")
    proc = run(["--kernel", "naive", "-n", "128"], REPO)
    assert proc.returncode == 0, proc.stderr
    assert "Backend: nkisim estimate, trn1" in proc.stdout


def test_profile_name_writes_the_files_and_says_where(tmp_path):
    proc = run(["--kernel", "stream", "-n", "2560", "--profile_name", "stream_small"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("Profile written: "))
    written = [Path(p.strip()) for p in line.removeprefix("Profile written: ").split(",")]
    assert {p.name for p in written} >= {"stream_small.neff", "stream_small.ntff", "stream_small.html"}
    assert all(p.is_file() and p.parent == tmp_path for p in written)
    assert not (tmp_path / "file.neff").exists()


def test_a_profiled_latency_is_labelled_and_printed_beside_the_ordinary_one(tmp_path):
    """Issue 26: the DGE-off profile run's latency never stands alone or unlabelled; the ordinary one is scored."""
    plain = run(["--kernel", "stream", "-n", "25600"], tmp_path)
    proc = run(["--kernel", "stream", "-n", "25600", "--profile_name", "s"], tmp_path)
    assert plain.returncode == proc.returncode == 0, proc.stderr
    ordinary = float(LATENCY.search(proc.stdout).group(1))
    assert ordinary == float(LATENCY.search(plain.stdout).group(1))  # profiling does not move the ordinary figure
    profiled = PROFILED.search(proc.stdout)
    assert profiled is not None, proc.stdout
    assert float(profiled.group(2)) == ordinary
    assert float(profiled.group(1)) != ordinary  # DGE off changes what this stream's DMAs cost on trn2
    assert "--disable-dge" in proc.stdout
    for page in ("s.summary.txt", "s.html"):  # the files say it too, with the ordinary latency
        text = (tmp_path / page).read_text(encoding="utf-8").replace("&#x27;", "'")
        assert "compiled with DGE off (--disable-dge)" in text
        assert f"an ordinary run of this kernel takes {ordinary:.2f} us" in text


def test_naive_beyond_128_reports_failure_without_timing():
    proc = run(["--kernel", "naive", "-n", "256"], REPO)
    assert proc.returncode == 1
    assert CORRECTNESS.search(proc.stdout).group(1) == "False"
    assert "exceed architecture limitation of 128" in proc.stdout
    assert LATENCY.search(proc.stdout) is None


def test_transpose_stub_fails_with_the_intended_message():
    proc = run(["--kernel", "transpose", "-n", "256", "-m", "128"], REPO)
    assert proc.returncode == 1
    assert "(128, 256)" in proc.stdout
    assert "Correctness passed? False" in proc.stdout
    assert "NotImplementedError: matrix_transpose is not implemented yet" in proc.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["--kernel", "bogus", "-n", "4"],
        ["--kernel", "stream", "-n", "0"],
        ["--kernel", "stream", "-n", "256", "-m", "4"],
        ["--kernel", "stream", "-n", "1024", "--profile_name", "/nonexistent/dir/x"],
    ],
)
def test_bad_command_lines_are_rejected(args):
    proc = run(args, REPO)
    assert proc.returncode == 2
    assert "error:" in proc.stderr


def _run_benchmark_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("part1_run_benchmark_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(SCRIPT.parent))
    return module


def test_a_failed_correctness_check_says_why():
    import neuronxcc.nki.language as nl
    import numpy as np

    rb = _run_benchmark_module()
    a = np.arange(128 * 64, dtype=np.float32).reshape(128, 64)

    def returns_none(x):
        return None

    def half_written(x):
        out = nl.ndarray((128, 128), dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out[0:64], nl.load(x[0:64]))
        return out

    def copies(x):
        out = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(x))
        return out

    def exits(x):
        sys.exit(0)

    assert rb.check_correctness(returns_none, "transpose", (a,)) == (
        False, "the kernel returned no output tensor (return the HBM tensor it writes)")
    square = np.ones((128, 128), dtype=np.float32)
    ok, why = rb.check_correctness(half_written, "transpose", (square,))
    assert not ok and why.startswith(f"the output holds {square.size // 2} NaN value(s)"), why
    ok, why = rb.check_correctness(copies, "transpose", (a,))
    assert not ok and why == "output shape (128, 64), expected (64, 128)"
    with pytest.raises(RuntimeError, match=r"the kernel called sys.exit\(0\) instead of returning its output"):
        rb.check_correctness(exits, "transpose", (a,))
