"""End to end: the staff solution earns its points and the starter files earn none, through the CLI as
Gradescope and CI call it; the autograder.zip has Gradescope's layout."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from grader_helpers import ROOT, check_reports

from grader import seeds
from grader.rubric import load_rubric

REFERENCE = ROOT / "grader" / "reference"
needs_reference = pytest.mark.skipif(
    not (REFERENCE / "part2" / "conv2d.py").exists(), reason="staff reference not shipped here"
)


def _grade(sub: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "grader", "grade", str(sub), "--out", str(out), *extra],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )


@needs_reference
@pytest.mark.slow
def test_reference_small_tests_pass_through_the_cli(tmp_path):
    only = "part1.transpose,part2.small,part2.ec_fp32,part2.ec_fp16_pool"
    proc = _grade(REFERENCE, tmp_path, "--only", only)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = check_reports(tmp_path, load_rubric().select(only.split(",")).total_points)
    assert all(t["status"] == "passed" for t in results["tests"]), results["tests"]
    assert "leaderboard" not in results and results["extra_data"]["ranked"] is False  # a student's own run
    record = json.loads((tmp_path / "result.json").read_text())
    assert record["backend"] == "nkisim" and record["target"] == "trn2"
    assert record["tests"][-1]["latency_us"] > 0 and record["tests"][-1]["mfu"] is not None


@needs_reference
@pytest.mark.slow
def test_reference_solution_earns_every_point(tmp_path):
    """The whole rubric on the staff solution: 40-90 s on 2 CPUs (figure: python -m grader.bench --mix staff=2)."""
    seed_file = tmp_path / "private" / "seed"
    seeds.write_seed(seed_file, 20261)
    out = tmp_path / "out"
    proc = _grade(REFERENCE, out, "--seed-file", str(seed_file))  # a ranked run, as on Gradescope with a class seed
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = check_reports(out, load_rubric().total_points)
    assert results["score"] == load_rubric().total_points, [(t["name"], t["output"]) for t in results["tests"]]
    assert [e["name"] for e in results["leaderboard"]] == [e.name for e in load_rubric().leaderboard.entries]
    assert "20261" not in json.dumps(results)


@pytest.mark.slow
def test_starter_files_earn_nothing_and_nothing_crashes(tmp_path):
    sub = tmp_path / "starter"
    for rel in ("part1/kernels.py", "part2/conv2d.py"):
        (sub / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, sub / rel)
    proc = _grade(sub, tmp_path / "out")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = check_reports(tmp_path / "out", load_rubric().total_points)
    assert results["score"] == 0
    statuses = {t["number"]: t["extra_data"]["status"] for t in results["tests"]}
    assert statuses["part1.transpose"] == "error" and statuses["part2.small"] == "error"
    assert statuses["part2.perf_fp32"] == "skipped"


def test_gradescope_zip_layout(tmp_path):
    out = tmp_path / "autograder.zip"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run(
        [sys.executable, "-m", "grader", "gradescope", "--out", str(out)], env=env, check=True, capture_output=True
    )
    with zipfile.ZipFile(out) as zf:
        names = set(zf.namelist())
        for script in ("setup.sh", "run_autograder"):
            info = zf.getinfo(script)
            assert (info.external_attr >> 16) & stat.S_IXUSR, f"{script} must be executable"
        run = zf.read("run_autograder").decode()
    assert {"pyproject.toml", "nkisim/__init__.py", "grader/rubric.toml", "grader/child.py"} <= names
    assert not any("__pycache__" in n for n in names)
    assert "/autograder/submission" in run and "--out /autograder/results" in run
    assert "GRADER_SANDBOX_USER" in run
    assert "secret-seed" not in names  # no class seed unless one is given
    seed_file = tmp_path / "seed"
    seeds.write_seed(seed_file, 4242)
    ranked = tmp_path / "ranked.zip"
    subprocess.run([sys.executable, "-m", "grader", "gradescope", "--out", str(ranked), "--seed-file", str(seed_file)],
                   env=env, check=True, capture_output=True)
    with zipfile.ZipFile(ranked) as zf:
        assert zf.read("secret-seed").decode().strip() == "4242"
    assert "--seed-file /autograder/source/secret-seed" in run
    setup = (ROOT / "grader" / "gradescope" / "setup.sh").read_text()
    assert 'chmod -R go-rwx "$SRC"' in setup  # the seed stays root-only like the staff reference


def test_github_workflow_template_runs_the_grader_and_posts_results():
    yaml = pytest.importorskip("yaml")
    wf = yaml.safe_load((ROOT / "grader" / "templates" / "github-workflow.yml").read_text())
    steps = wf["jobs"]["grade"]["steps"]
    runs = "\n".join(s.get("run", "") for s in steps)
    assert "make setup" in runs and "-m grader grade . --out grader-results --github" in runs
    assert any("junit.xml" in str(s.get("with", {})) for s in steps)
    assert any(s.get("uses", "").startswith("actions/upload-artifact") for s in steps)
    triggers = wf.get("on", wf.get(True))  # YAML 1.1 reads the key `on` as True
    assert "push" in triggers


def test_sigterm_removes_the_run_directories_and_writes_no_reports(tmp_path):
    """A TA's kill (SIGTERM) unwinds like Ctrl-C: no asst4-case-* directory is left in the temp directory and no
    partial report is written."""
    import signal
    import time

    from grader_helpers import HOSTILE

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "grader", "grade", str(HOSTILE / "infinite_loop"), "--out", str(out),
         "--only", "part1.transpose"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    deadline = time.monotonic() + 120
    while not list(tmp.glob("asst4-case-*")) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    assert list(tmp.glob("asst4-case-*")), "the grader never started a case"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "grader: interrupted" in err
    assert not list(tmp.glob("asst4-case-*"))
    assert not (out / "results.json").exists()
