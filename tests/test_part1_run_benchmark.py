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
BACKEND = re.compile(r"^Backend: (Trainium \(neuronx-cc\)|nkisim estimate, trn[12])$", re.M)


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
    assert BACKEND.search(out).group(1) == latency.group(2) == "nkisim estimate, trn2"


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
    ],
)
def test_bad_command_lines_are_rejected(args):
    proc = run(args, REPO)
    assert proc.returncode == 2
    assert "error:" in proc.stderr
