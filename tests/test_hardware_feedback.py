"""The hardware feedback loop (issue 33, deliverable 5): a kernel timed on Trainium also gets nkisim's estimate,
the pairs export as calibration rows ``python -m nkisim.calibrate --pairs`` runs, with an agreement report.

Trainium is AWS's toolchain faked as in tests/test_nkibench.py (tests/fixtures/nkibench: the current SDK's nki and
nrtpy, a fake device whose p99 follows the input size); nkisim's estimate runs in its own process, where nkisim's
emulation must win over the (fake) installed ``nki``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_nkibench import FIX, REPO, fake_device, new_sdk  # noqa: F401 - the fake Trainium fixtures

import nkibench
from nkibench import feedback

KERNEL = '''
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def tile_add(a_input, b_input):
    if not hasattr(nl, "ndarray"):  # the fake SDK (tests/fixtures/nkibench) runs a kernel as NumPy
        return a_input + b_input
    out = nl.ndarray(a_input.shape, dtype=a_input.dtype, buffer=nl.shared_hbm)
    a = nl.ndarray(a_input.shape, dtype=a_input.dtype, buffer=nl.sbuf)
    b = nl.ndarray(b_input.shape, dtype=b_input.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=a_input)
    nisa.dma_copy(dst=b, src=b_input)
    nisa.tensor_tensor(dst=a, data1=a, data2=b, op=nl.add)
    nisa.dma_copy(dst=out, src=a)
    return out
'''

LEGACY = '''
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def scale(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.multiply(nl.load(x), 3.0))
    return out
'''


@pytest.fixture
def pairs(tmp_path, monkeypatch):
    d = tmp_path / "pairs"
    monkeypatch.setenv(feedback.DIR_ENV, str(d))
    dmi = tmp_path / "product_name"
    dmi.write_text("trn2.3xlarge\n")  # the instance type names the generation (the backends say "instance")
    monkeypatch.setattr(feedback, "_DMI", str(dmi))
    monkeypatch.delenv(feedback.RECORD_ENV, raising=False)
    return d


def _kernel(tmp_path, new_sdk_unused=None):
    import importlib.util

    path = tmp_path / "hw_kernels.py"
    path.write_text(KERNEL)
    spec = importlib.util.spec_from_file_location("hw_feedback_kernels", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.tile_add, path


def _nkisim_estimate(path: Path, function: str, shapes, target: str) -> float:
    """nkisim's own estimate of the file's kernel, computed independently of the recording."""
    code = (
        "import sys, json, numpy as np\n"
        "from nkisim.calibration.feedback import load_kernel\n"
        "from nkisim.core.runtime import run_kernel\n"
        "from nkisim.perf import estimate\n"
        f"k = load_kernel({str(path)!r}, {function!r})\n"
        f"args = [np.zeros(s, np.float32) for s in {shapes!r}]\n"
        f"print(estimate(run_kernel(k, args, mode='timing', target={target!r}).trace).nc_latency_us)\n"
    )
    env_path = f"{FIX / 'nki_env'}:{REPO}"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin", "HOME": "/tmp"})
    return float(out.stdout.strip().splitlines()[-1])


def test_a_hardware_timing_records_nkisims_estimate_of_the_same_kernel(new_sdk, pairs, tmp_path):  # noqa: F811
    kernel, path = _kernel(tmp_path)
    a = np.random.default_rng(0).random((128, 512), dtype=np.float32)
    m = nkibench.measure(kernel, (a, a), warmup=1, iterations=5)
    assert m.timing.backend == "neuron-nki" and m.timing.measured
    recs = [json.loads(line) for line in (pairs / "pairs.jsonl").read_text().splitlines()]
    assert len(recs) == 1
    rec = recs[0]
    assert rec["measured_us"] == m.timing.p99_us and rec["by"] == "nkibench.measure"
    assert rec["function"] == "tile_add" and rec["args"] == [{"shape": [128, 512], "dtype": "float32"}] * 2
    assert Path(rec["source"]).read_text() == KERNEL  # a copy: later edits of the file do not change the row
    assert rec["versions"] == {"nki": "0.6.0", "nrtpy": "2.34.10"} and rec["target"] == "trn2"
    assert "estimate_error" not in rec, rec.get("estimate_error")
    assert rec["estimate_us"] == pytest.approx(_nkisim_estimate(path, "tile_add", [(128, 512)] * 2, rec["target"]))


def test_export_writes_rows_calibrate_runs_and_an_agreement_report(new_sdk, pairs, tmp_path):  # noqa: F811
    kernel, _ = _kernel(tmp_path)
    rng = np.random.default_rng(1)
    for shape in ((128, 512), (128, 512), (128, 2048)):
        a = rng.random(shape, dtype=np.float32)
        nkibench.measure(kernel, (a, a), warmup=1, iterations=5)
    rows_file = tmp_path / "rows.jsonl"
    report_file = tmp_path / "report.txt"
    env_py = f"{REPO}"
    proc = subprocess.run([sys.executable, "-m", "nkisim.calibration.feedback", "export", "--dir", str(pairs),
                           "-o", str(rows_file), "--report", str(report_file)], capture_output=True, text=True,
                          cwd=tmp_path, env={"PYTHONPATH": env_py, "PATH": "/usr/bin:/bin", "HOME": "/tmp"})
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in rows_file.read_text().splitlines()]
    assert len(rows) == 2  # the two timings of the same kernel, inputs and target are one row (their median)
    small = next(r for r in rows if r["args"][0]["shape"] == [128, 512])
    assert small["samples"] == 2
    report = report_file.read_text()
    assert small["id"] in report and "median absolute error" in report and "Kendall tau" in report
    # the current model on the exported rows, through nkisim.calibrate
    proc = subprocess.run([sys.executable, "-m", "nkisim.calibrate", "--pairs", str(rows_file), "--rows", "hw-*",
                           "--no-loo", "-q"], capture_output=True, text=True, cwd=tmp_path,
                          env={"PYTHONPATH": env_py, "PATH": "/usr/bin:/bin", "HOME": "/tmp"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith(small["id"]))
    predicted = float(line.split()[-4])  # ... measured, predicted, ratio, role, instrs
    assert predicted == pytest.approx(small["estimate_us"], rel=1e-3)
    assert "training rows: 2" in proc.stdout


def test_recording_can_be_turned_off_and_nkisim_timings_are_not_recorded(new_sdk, pairs, tmp_path,  # noqa: F811
                                                                          monkeypatch):
    kernel, _ = _kernel(tmp_path)
    a = np.zeros((128, 64), np.float32)
    monkeypatch.setenv(feedback.RECORD_ENV, "0")
    nkibench.measure(kernel, (a, a), warmup=1, iterations=2)
    assert not (pairs / "pairs.jsonl").exists()
    monkeypatch.delenv(feedback.RECORD_ENV)

    class Modelled:  # what the nkisim backend returns: an estimate, never a hardware pair
        measured, backend = False, "nkisim"

    assert feedback.record(kernel, (a, a), {}, Modelled(), source="test") is None
    assert not (pairs / "pairs.jsonl").exists()


def test_the_grader_records_its_hardware_latency_with_the_estimate(pairs):
    from grader.problems.base import Invocation
    from grader.runner import CaseRun, _record_hardware_pair

    x = np.random.default_rng(2).random((128, 256), dtype=np.float32)
    inv = Invocation([x], {}, x.shape, x.dtype, 0.0)
    run = CaseRun("ok", hardware_p99_us=42.0, hardware={"backend": "neuron-legacy",
                                                         "versions": {"neuronx-cc": "2.21.0"}})
    _record_hardware_pair(LEGACY.encode(), "part1/kernels.py", "scale", inv, "trn1", "legacy", run)
    rec = json.loads((pairs / "pairs.jsonl").read_text())
    assert (rec["by"], rec["measured_us"], rec["target"], rec["backend"]) == ("grader", 42.0, "trn1", "neuron-legacy")
    assert rec["file"] == "part1/kernels.py" and rec["versions"] == {"neuronx-cc": "2.21.0"}
    assert rec["estimate_us"] > 0, rec.get("estimate_error")
