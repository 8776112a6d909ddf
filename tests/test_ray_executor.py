"""``--executor ray``: same grades as the local pool, infrastructure failures retried, NeuronCores pinned.

The Ray tests share one local cluster (2 CPUs, 2 fake ``neuron_cores``, loopback only, no dashboard) started
by a module fixture; the xdist group asks for one worker so the ~10 s Ray start-up is paid once, and the tests
stay correct when xdist splits them anyway (each worker then has its own cluster; the task a test kills has a
name unique to that test).  They grade tiny submissions against a small rubric written here.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grader import cli
from grader.batch import GradeJob, JobResult, grade_one, run_batch
from grader.ray_executor import (
    INSTALL_HINT,
    NEURON_RESOURCE,
    VISIBLE_CORES_ENV,
    RayExecutor,
    RayUnavailableError,
    TaskResources,
    _check_reachable,
    choose_backend,
    describe_failure,
    grade_on_worker,
    pinned_env,
    task_resources,
)
from grader.records import GradeConfig
from grader.submission import load_submission

pytestmark = pytest.mark.slow  # make test-fast leaves it out: see docs/maintainers.md


REPO = Path(__file__).resolve().parents[1]
REFERENCE_PART1 = REPO / "grader" / "reference" / "part1" / "kernels.py"

RUBRIC = """
[rubric]
title = "ray executor test rubric"
version = 1
seed = 11
partial_credit = 0.9
threshold_factor = 1.2
verify_performance_outputs = true

[limits]
address_space_mib = 3072
file_size_mib = 256
processes = 32
open_files = 128
cpu_seconds_slack = 5

[tolerances]
float32 = { rtol = 1e-5, atol = 1e-8 }

[[test]]
id = "part1.transpose"
name = "transpose correctness"
part = 1
file = "part1/kernels.py"
function = "matrix_transpose"
kind = "correctness"
problem = "transpose"
points = 10
# 10 s per case: a good kernel's case (a fresh sandboxed process importing numpy and nkisim) took over 3 s on a
# loaded 2-core machine and scored 0; the hanging stub pays the limit, twice per run
timeout_s = 10
cases = [{ shape = [256, 128], dtype = "float32" }, { shape = [128, 384], dtype = "float32" }]

[[test]]
id = "part1.transpose_speed"
name = "transpose latency (fixed targets)"
part = 1
file = "part1/kernels.py"
function = "matrix_transpose"
kind = "performance"
problem = "transpose"
points = 2
extra_credit = true
requires = ["part1.transpose"]
timeout_s = 10
cases = [{ shape = [512, 512], dtype = "float32" }]
thresholds = { source = "fixed", optimized_us = 1000000.0, relaxed_us = 2000000.0 }
"""

KERNEL_HEADER = "import neuronxcc.nki as nki\n\n\n@nki.jit\ndef matrix_transpose(a_tensor):\n"
STUB_BODIES = {
    "buggy": '    raise ValueError("student bug")\n',
    # A deep chain of C-level iterators: next() overflows the C stack and the kernel process dies (SIGSEGV).
    "crash": "    it = iter(())\n    for _ in range(400_000):\n        it = filter(None, it)\n    return next(it)\n",
    "hang": "    n = 0\n    while True:\n        n += 1\n",
}


def _good(root: Path, name: str) -> None:
    if not REFERENCE_PART1.exists():  # the student release ships no staff solution to grade as "good"
        pytest.skip("staff reference not shipped here")
    (root / name / "part1").mkdir(parents=True)
    (root / name / "part1" / "kernels.py").write_text(REFERENCE_PART1.read_text() + f"\n# {name}\n")


def _stub(root: Path, name: str, body: str) -> None:
    (root / name / "part1").mkdir(parents=True)
    (root / name / "part1" / "kernels.py").write_text(KERNEL_HEADER + body)


def _config(tmp: Path, **kw) -> GradeConfig:
    rubric = tmp / "rubric.toml"
    if not rubric.exists():
        rubric.write_text(RUBRIC)
    return GradeConfig(rubric_path=str(rubric), backend="nkisim", **kw)


def _gradebook(path: Path) -> dict[str, dict[str, str]]:
    """Rows by student, without the columns that legitimately differ between runs (time, output path)."""
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    return {r["student"]: {k: v for k, v in r.items() if k not in ("seconds", "result_dir")} for r in rows}


# ------------------------------------------------------------------------------- without a cluster ----


def test_nkisim_tasks_ask_for_one_cpu_per_concurrent_kernel_run() -> None:
    assert task_resources("nkisim", 1) == TaskResources(num_cpus=1)
    assert task_resources("nkisim", 3).ray_options() == {"num_cpus": 3}
    assert task_resources("nkisim", 0).num_cpus == 1


def test_hardware_tasks_hold_one_neuron_core_whatever_the_worker_count() -> None:
    res = task_resources("neuron", 8)
    assert res == TaskResources(num_cpus=1, neuron_cores=1)
    assert res.ray_options() == {"num_cpus": 1, "resources": {NEURON_RESOURCE: 1}}
    with pytest.raises(ValueError, match="nkisim or neuron"):
        task_resources("auto", 1)


def test_backend_follows_the_cluster() -> None:
    assert choose_backend("nkisim", 16) == "nkisim"
    assert choose_backend("auto", 0) == "nkisim"
    assert choose_backend("auto", 2) == "neuron"
    assert choose_backend("neuron", 1) == "neuron"
    with pytest.raises(ValueError, match=r"ray start .*neuron_cores"):
        choose_backend("neuron", 0)
    with pytest.raises(ValueError, match="auto, nkisim or neuron"):
        choose_backend("gpu", 4)


@given(st.lists(st.integers(min_value=0, max_value=127), min_size=1, max_size=8))
def test_pinned_env_names_exactly_the_assigned_cores(cores: list[int]) -> None:
    env = pinned_env(cores)
    assert list(env) == [VISIBLE_CORES_ENV]
    assert [int(c) for c in env[VISIBLE_CORES_ENV].split(",")] == cores


@pytest.mark.parametrize("ids", [[], ["x"], ["0", ""], [-1]])
def test_a_task_without_a_usable_core_id_refuses_to_run(ids: list) -> None:
    with pytest.raises(RuntimeError, match="no usable NeuronCore"):
        pinned_env(ids)


def test_failure_description_is_one_line() -> None:
    exc = RuntimeError("worker died\n  traceback line\n")
    assert describe_failure(exc) == "RuntimeError: worker died"
    assert describe_failure(KeyError()) == "KeyError"

    class FakeRayTaskError(Exception):  # like ray.exceptions.RayTaskError: colored header, the cause attached
        cause = OSError("disk full")

    assert describe_failure(FakeRayTaskError("\x1b[36mray::grade:x()\x1b[39m (pid=1)\nTraceback")) == (
        "FakeRayTaskError: disk full")


def test_a_wrong_address_fails_fast_with_the_reason() -> None:
    import socket

    with socket.socket() as sock:  # a port nobody listens on once the socket is closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match=rf"cannot reach the Ray cluster at 127.0.0.1:{port}.*ray start --head"):
        _check_reachable(f"127.0.0.1:{port}")
    assert time.perf_counter() - t0 < 5
    _check_reachable("auto")  # not HOST:PORT: left to Ray


def test_missing_ray_gives_the_install_command(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # makes `import ray` raise ImportError
    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    with pytest.raises(RayUnavailableError, match=r'pip install "\.\[ray\]"'):
        RayExecutor(2)
    _good(tmp_path / "subs", "alice")
    code = cli.main(["batch", str(tmp_path / "subs"), "--out", str(tmp_path / "out"), "--executor", "ray",
                     "--quiet", "--rubric", str(_config(tmp_path).rubric_path)])
    assert code == cli.EXIT_USAGE
    assert INSTALL_HINT in capsys.readouterr().err


def test_shipped_task_needs_no_path_of_the_driver(tmp_path: Path) -> None:
    """--ship-files: the task grades from the bytes it was sent, even when the driver's paths do not exist."""
    _good(tmp_path / "subs", "alice")
    config = _config(tmp_path)
    sub = load_submission(str(tmp_path / "subs" / "alice"), "alice")
    rubric = Path(config.rubric_path).read_bytes()
    shutil.rmtree(tmp_path / "subs")
    Path(config.rubric_path).unlink()
    record = grade_on_worker(sub, config, rubric, False)
    assert (record.status, record.score, record.student) == ("graded", 12, "alice")
    assert record.config["rubric_path"] == config.rubric_path and record.submission == sub.path


def test_address_is_refused_for_the_local_executor(tmp_path: Path, capsys) -> None:
    code = cli.main(["batch", str(tmp_path), "--out", str(tmp_path / "out"), "--address", "10.0.0.1:6379"])
    assert code == cli.EXIT_USAGE
    assert "--address only applies to --executor ray" in capsys.readouterr().err
    code = cli.main(["batch", str(tmp_path), "--out", str(tmp_path / "out"), "--ship-files"])
    assert code == cli.EXIT_USAGE
    assert "--ship-files only applies to --executor ray" in capsys.readouterr().err


# ---------------------------------------------------------------------------------- with a cluster ----


@pytest.fixture(scope="module")
def ray_cluster():
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # before ray is imported: bind/advertise loopback
    try:
        import ray
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the Ray tests: {INSTALL_HINT}")
        pytest.skip(INSTALL_HINT)
    ray.init(num_cpus=2, resources={NEURON_RESOURCE: 2}, include_dashboard=False, log_to_driver=False,
             logging_level="WARNING")
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def stub_batch(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("subs")
    _good(root, "alice")
    for name, body in STUB_BODIES.items():
        _stub(root, name, body)
    (root / "missing").mkdir()
    (root / "missing" / "README.txt").write_text("forgot the kernels\n")
    return root


@pytest.mark.ray
@pytest.mark.xdist_group("ray")
def test_cluster_is_loopback_only(ray_cluster) -> None:
    assert {n["NodeManagerAddress"] for n in ray_cluster.nodes()} == {"127.0.0.1"}


@pytest.mark.ray
@pytest.mark.xdist_group("ray")
def test_ray_batch_matches_the_local_executor(ray_cluster, stub_batch: Path, tmp_path: Path, capsys) -> None:
    config = _config(tmp_path)
    local_out, ray_out = tmp_path / "local", tmp_path / "ray"
    run_batch(stub_batch, local_out, config, jobs=2, executor="local", progress=False)
    args = ["batch", str(stub_batch), "--out", str(ray_out), "--executor", "ray", "--backend", "nkisim",
            "--rubric", config.rubric_path, "--seed-mode", "submission"]  # as run_batch's config above
    assert cli.main(args) == cli.EXIT_OK
    err = capsys.readouterr().err

    book = _gradebook(ray_out / "gradebook.csv")
    assert book == _gradebook(local_out / "gradebook.csv")
    assert {s: r["status"] for s, r in book.items()} == dict.fromkeys(
        ("alice", "buggy", "crash", "hang", "missing"), "graded")
    assert book["alice"]["total"] == "12" and book["alice"]["part1.transpose"] == "10"
    verdicts = {}
    for student in book:
        (result_dir,) = (ray_out / student).iterdir()
        record = json.loads((result_dir / "result.json").read_text())
        verdicts[student] = (record["tests"][0]["status"], record["tests"][0]["message"])
    assert verdicts["crash"][0] == "error" and "SIGSEGV" in verdicts["crash"][1]
    assert verdicts["hang"][0] == "timeout"
    assert verdicts["missing"][0] == "missing"
    assert "retried" not in err  # the students' own failures are verdicts, never retried

    # The same overview, except for the times (wall time, time per submission, slowest submissions).
    overview, ray_times = (ray_out / "overview.md").read_text().split("## Time per submission")
    local_overview, local_times = (local_out / "overview.md").read_text().split("## Time per submission")
    overview, local_overview = overview.splitlines(), local_overview.splitlines()
    same = [i for i, line in enumerate(local_overview) if "wall time" not in line]
    assert [overview[i] for i in same] == [local_overview[i] for i in same]
    slowest = {line.split("|")[1].strip() for line in ray_times.splitlines() if line.startswith("| ")} - {"student"}
    assert slowest == set(book)
    assert not (ray_out / ".staging").exists()

    # --ship-files: the driver reads the submissions and writes the results; same grades.
    shipped_out = tmp_path / "shipped"
    assert cli.main([*args[:3], str(shipped_out), *args[4:], "--ship-files", "--quiet"]) == cli.EXIT_OK
    assert _gradebook(shipped_out / "gradebook.csv") == book

    # Resume: a second run reuses every result instead of grading again.
    again = run_batch(stub_batch, ray_out, config, executor="ray", progress=False)
    assert sorted(r.status for r in again) == ["skipped"] * 5


def _kill_task_when_it_starts(title: str, killed: list[int], stop: threading.Event) -> None:
    """SIGKILL the Ray worker whose process title is ``title`` (Ray names it ray::<task name>) once."""
    wanted = f"ray::{title}".encode()
    while not stop.is_set():
        for pid in filter(str.isdigit, os.listdir("/proc")):
            if stop.is_set():
                return
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if cmdline.split(b"\0")[0].strip() == wanted:
                os.kill(int(pid), signal.SIGKILL)
                killed.append(int(pid))
                return
        time.sleep(0.02)


def _batch_with_a_kill(tmp_path: Path, victim: str, **options) -> tuple[list[JobResult], list[int], Path]:
    """Grade the victim and bob on Ray while a thread SIGKILLs the victim's worker once, mid-grading."""
    subs, out = tmp_path / "subs", tmp_path / "out"
    for name in (victim, "bob"):
        _good(subs, name)
    killed: list[int] = []
    stop = threading.Event()
    killer = threading.Thread(target=_kill_task_when_it_starts, args=(f"grade:{victim}", killed, stop), daemon=True)
    killer.start()
    try:
        results = run_batch(subs, out, _config(tmp_path), executor="ray", progress=True, executor_options=options)
    finally:
        stop.set()
        killer.join(5)
    assert len(killed) == 1, "the test never saw the victim's grading task running"
    return results, killed, out


@pytest.mark.ray
@pytest.mark.xdist_group("ray")
@pytest.mark.parametrize("ship_files", [False, True], ids=["shared-fs", "ship-files"])
def test_task_killed_mid_run_is_retried_and_published_once(ray_cluster, tmp_path: Path, capsys,
                                                           ship_files: bool) -> None:
    victim = f"victim{os.getpid()}{'ship' if ship_files else 'shared'}"  # unique: other clusters may be running
    results, _, out = _batch_with_a_kill(tmp_path, victim, ship_files=ship_files)
    err = capsys.readouterr().err
    assert "retried=1" in err and f"{victim} (WorkerCrashedError" in err
    by_student = {r.student: r for r in results}
    assert {s: (r.status, r.score) for s, r in by_student.items()} == {victim: ("graded", 12), "bob": ("graded", 12)}
    (result_dir,) = (out / victim).iterdir()  # exactly one content-addressed directory, complete
    assert sorted(p.name for p in result_dir.iterdir()) == ["junit.xml", "result.json", "results.json", "summary.md"]
    assert json.loads((result_dir / "result.json").read_text())["score"] == 12
    assert not (out / ".staging").exists()
    log = [json.loads(line) for line in (out / "batch.jsonl").read_text().splitlines()]
    assert sorted(e["student"] for e in log) == sorted([victim, "bob"])  # one result per job, retry included


@pytest.mark.ray
@pytest.mark.xdist_group("ray")
def test_infrastructure_failure_is_a_grader_error_not_a_zero(ray_cluster, tmp_path: Path) -> None:
    victim = f"victim{os.getpid()}noretry"
    results, _, out = _batch_with_a_kill(tmp_path, victim, retries=0)
    by_student = {r.student: r for r in results}
    assert by_student["bob"].status == "graded"
    failed = by_student[victim]
    assert failed.status == "error" and "infrastructure failure" in failed.error
    assert "WorkerCrashedError" in failed.error
    row = _gradebook(out / "gradebook.csv")[victim]
    assert (row["status"], row["total"], row["part1.transpose"]) == ("error", "", "")
    assert victim in (out / "overview.md").read_text().split("Grader errors")[1]
    assert not (out / victim).exists()  # nothing published for the failed attempt
    again = {r.student: r.status for r in run_batch(tmp_path / "subs", out, _config(tmp_path), executor="ray",
                                                    progress=False)}
    assert again == {victim: "graded", "bob": "skipped"}  # the next run grades only what failed


@pytest.mark.ray
@pytest.mark.xdist_group("ray")
def test_retries_are_bounded_and_reported_as_infrastructure(ray_cluster, tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    calls.mkdir()

    def grader_that_always_breaks(job: GradeJob) -> JobResult:
        (calls / f"{os.getpid()}-{time.monotonic_ns()}").touch()
        raise OSError("results volume went away")

    seen: list[str] = []
    executor = RayExecutor(2, retries=2)
    executor.on_retry = lambda job, why: seen.append(why)
    job = GradeJob(str(tmp_path / "sub"), "carol", str(tmp_path / "out"), _config(tmp_path))
    (result,) = list(executor.map_unordered(grader_that_always_breaks, [job]))
    assert result.status == "error" and result.student == "carol"
    assert result.error.startswith("infrastructure failure, not the submission's fault, after 3 attempt(s)")
    assert "results volume went away" in result.error
    assert executor.retried == 2 and len(seen) == 2 and len(list(calls.iterdir())) == 3


@pytest.mark.ray
@pytest.mark.xdist_group("ray")
def test_hardware_tasks_run_one_per_neuron_core_and_pin_it(ray_cluster, tmp_path: Path) -> None:
    """The neuron path without a device: Ray's neuron_cores scheduling + our NEURON_RT_VISIBLE_CORES pinning."""

    def measure(job: GradeJob) -> JobResult:
        start = time.time()
        time.sleep(0.4)
        seen = {"core": os.environ.get(VISIBLE_CORES_ENV), "start": start, "end": time.time(),
                "backend": job.config.backend, "workers": job.config.workers}
        return JobResult(job.student, job.submission, "graded", error=json.dumps(seen))

    config = replace(_config(tmp_path), backend="neuron", workers=4)
    jobs = [GradeJob(str(tmp_path / f"s{i}"), f"s{i}", str(tmp_path / "out"), config) for i in range(6)]
    runs = [json.loads(r.error) for r in RayExecutor(2).map_unordered(measure, jobs)]
    assert len(runs) == 6
    assert {r["backend"] for r in runs} == {"neuron"} and {r["workers"] for r in runs} == {1}
    assert {r["core"] for r in runs} == {"0", "1"}  # each task sees exactly one core, both cores used
    for core in ("0", "1"):
        spans = sorted((r["start"], r["end"]) for r in runs if r["core"] == core)
        assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:])), spans


@pytest.mark.ray
@pytest.mark.xdist_group("ray")
def test_unsatisfiable_resources_fail_fast(ray_cluster, tmp_path: Path) -> None:
    config = replace(_config(tmp_path), workers=64)  # 64 CPUs per task on a 2-CPU cluster would wait forever
    job = GradeJob(str(tmp_path / "s"), "s", str(tmp_path / "out"), config)
    with pytest.raises(ValueError, match="no live node .* 64 CPU"):
        list(RayExecutor(2).map_unordered(grade_one, [job]))
