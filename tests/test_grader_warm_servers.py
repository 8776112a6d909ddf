"""The warm kernel servers (grader/forkserver.py, grader/sandbox.py: WarmServer, grader/runner.py: KernelServers):
one pre-imported interpreter per grading and API forks each kernel call, side by side when calls are made so.  What
must hold: every call starts from the server's state, never from an earlier call's; a call sees only its own
processes, and not the directories of the calls running beside it; a call that hangs is killed alone and the next
call runs in the same server; the calls' CPU time reaches the grader's accounting; and grading with servers gives
exactly what one process per call gives."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from grader_helpers import FAST_RUBRIC, GOOD, check_reports

from grader.pipeline import grade_submission
from grader.records import GradeConfig
from grader.rubric import load_rubric
from grader.sandbox import detect_isolation

needs_namespaces = pytest.mark.skipif(not detect_isolation().unshare_argv, reason="needs mount namespaces")

# A correct transpose that remembers, in a module global, every call made in its process: a second call in the same
# process (state carried from one test or case to the next) fails it.
REMEMBERS = '''
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl

CALLS = []


@nki.jit
def matrix_transpose(a_tensor):
    CALLS.append(a_tensor.shape)
    if len(CALLS) > 1:
        raise RuntimeError("STATE FROM AN EARLIER CALL: " + str(CALLS))
    M, N = a_tensor.shape
    P = nl.tile_size.pmax
    out = nl.ndarray((N, M), dtype=a_tensor.dtype, buffer=nl.hbm)
    for i in nl.affine_range(M // P):
        for j in nl.affine_range(N // P):
            tile = nl.ndarray((P, P), dtype=a_tensor.dtype, buffer=nl.sbuf)
            nisa.dma_copy(src=a_tensor[i * P : (i + 1) * P, j * P : (j + 1) * P], dst=tile)
            back = nisa.tensor_copy(nisa.nc_transpose(tile))
            nisa.dma_copy(src=back, dst=out[j * P : (j + 1) * P, i * P : (i + 1) * P])
    return out
'''

# How the kernels below escape the Python restrictions (the screen is off): sys from a builtin class's globals.
_ESCAPE = '''
def _sys():
    for cls in ().__class__.__base__.__subclasses__():
        if cls.__name__ == "_wrap_close":
            return cls.__init__.__globals__["sys"]
    raise RuntimeError("no escape found")
'''

# Screen off: escapes the Python restrictions and reports the processes its /proc shows and what they run.
LOOKS_AROUND = "\nimport neuronxcc.nki as nki\n\n" + _ESCAPE + '''

@nki.jit
def matrix_transpose(a_tensor):
    os = _sys().modules["os"]
    seen = []
    for pid in sorted(p for p in os.listdir("/proc") if p.isdigit()):
        try:
            with _sys().modules["io"].open("/proc/" + pid + "/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\\0", b" ").decode()
        except OSError as exc:
            cmd = "unreadable: " + exc.strerror
        seen.append(pid + "=" + cmd)
    raise RuntimeError("PROCESSES " + repr(seen) + " SELF " + str(os.getpid()))
'''


def _two_correctness_tests(tmp_path: Path) -> Path:
    """The fast rubric plus a second correctness test on one smaller tile (ready at the same time as the first)."""
    rubric = tmp_path / "rubric.toml"
    rubric.write_text(Path(FAST_RUBRIC).read_text() + """
[[test]]
id = "part1.transpose_small"
name = "transpose correctness, one tile"
part = 1
file = "part1/kernels.py"
function = "matrix_transpose"
kind = "correctness"
problem = "transpose"
points = 1
timeout_s = 20
cases = [{ shape = [128, 128], dtype = "float32" }]
""")
    return rubric


def _submission(tmp_path: Path, kernels: str) -> Path:
    sub = tmp_path / "sub"
    shutil.copytree(GOOD, sub)
    (sub / "part1" / "kernels.py").write_text(kernels)
    return sub


def _grade(tmp_path: Path, sub: Path, name: str = "out", rubric: str = FAST_RUBRIC, **kw):
    scratch = tmp_path / f"scratch-{name}"
    scratch.mkdir()
    cfg = GradeConfig(rubric_path=rubric, tmp_root=str(scratch), **kw)
    record = grade_submission(sub, tmp_path / name, cfg)
    assert record.status == "graded", record.error
    check_reports(tmp_path / name, load_rubric(rubric).total_points)
    assert not list(scratch.iterdir()), "run and server directories must be removed"
    return record


def test_every_call_starts_from_the_servers_state_not_an_earlier_calls(tmp_path):
    """Three calls of a kernel that fails on a second call in its process (two correctness cases and the timed run,
    one after another in the same server): all pass, so no call saw another's module state."""
    record = _grade(tmp_path, _submission(tmp_path, REMEMBERS), workers=1)
    assert [t.status for t in record.tests] == ["passed", "passed"], [t.message for t in record.tests]
    assert sum(len(t.cases) for t in record.tests) == 3


@needs_namespaces
def test_a_call_sees_only_its_own_processes(tmp_path):
    """A kernel that escaped the Python restrictions lists /proc: it is PID 1 of a namespace of its own and sees no
    other process (no server, no sibling call, no grader); the one process it sees is itself, a fork of the server."""
    record = _grade(tmp_path, _submission(tmp_path, LOOKS_AROUND), screen=False, workers=1)
    msg = record.tests[0].message
    assert "PROCESSES" in msg, msg
    seen = msg.split("PROCESSES ", 1)[1].split(" SELF ", 1)[0]
    assert seen.startswith("['1=") and seen.count("', '") == 0, seen
    assert "SELF 1" in msg, msg
    assert {"pid-namespace", "private-proc"} <= set(record.isolation), record.isolation


def test_the_calls_cpu_time_reaches_the_grading_record(tmp_path):
    """The servers are reaped, not killed, and are started from a thread that outlives the grading's worker threads
    (setpriv's parent-death signal follows the thread that forked): otherwise their calls' CPU seconds never reach
    RUSAGE_CHILDREN and result.json's cpu:kernels_s misses them.  Two tests ready at once run on two worker
    threads, which end with their phase."""
    record = _grade(tmp_path, GOOD, rubric=str(_two_correctness_tests(tmp_path)), workers=2)
    assert [t.status for t in record.tests] == ["passed"] * 3
    # the import check of part1/kernels.py + 4 kernel calls, each specialized in one process and executed in another
    # (docs/grading-security.md, item 5), all forks of one server (one API), side by side or not
    assert record.timings["processes:calls"] == 1 + 4 * 2
    assert record.timings["processes:started"] == 1, record.timings
    calls = sum(c.cpu_seconds or 0.0 for t in record.tests for c in t.cases)
    assert calls > 0
    assert record.timings["cpu:kernels_s"] >= 0.9 * calls, (record.timings, calls)


def test_servers_grade_exactly_as_one_process_per_call(tmp_path, monkeypatch):
    """The same submission graded with warm servers and with one process per call: the same verdicts, messages,
    latencies and errors."""
    warm = _grade(tmp_path, GOOD, "warm", workers=1)
    monkeypatch.setenv("GRADER_WARM_SERVERS", "0")
    cold = _grade(tmp_path, GOOD, "cold", workers=1)

    def view(record):
        return [(t.id, t.status, t.score, t.latency_us, t.message, [(c.verdict, c.max_abs_error) for c in t.cases])
                for t in record.tests]

    assert view(warm) == view(cold)
    assert json.loads((tmp_path / "warm" / "results.json").read_text())["score"] == warm.score


@pytest.mark.slow
def test_a_hung_call_is_killed_and_the_next_call_runs_in_the_same_server(tmp_path):
    """The kernel loops forever on one shape: that call times out and is killed (its process group, its PID
    namespace and its pids cgroup); a later test's smaller call runs in a fork of the same server and passes."""
    rubric = _two_correctness_tests(tmp_path)
    hangs = REMEMBERS.replace("    CALLS.append(a_tensor.shape)\n",
                              "    CALLS.append(a_tensor.shape)\n    while a_tensor.shape[0] == 256:\n        pass\n")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    cfg = GradeConfig(rubric_path=str(rubric), tmp_root=str(scratch), workers=1, timeout_scale=0.25)
    record = grade_submission(_submission(tmp_path, hangs), tmp_path / "out", cfg)
    by_id = {t.id: t for t in record.tests}
    assert by_id["part1.transpose"].status == "timeout", by_id["part1.transpose"].message
    assert by_id["part1.transpose_small"].status == "passed", by_id["part1.transpose_small"].message
    assert record.timings["processes:started"] == 1 and record.timings["processes:calls"] >= 4, record.timings
    assert not list(scratch.iterdir()), "run and server directories must be removed"


def test_a_shared_input_is_written_once_per_grading(tmp_path):
    """The 224x224 batch-4 tests share X and W: one file per array and grading, readable by the calls, gone after."""
    import numpy as np

    from grader.runner import KernelServers

    servers = KernelServers(target="trn2", limits=load_rubric(FAST_RUBRIC).limits, tmp_root=str(tmp_path))
    x, w = np.arange(12, dtype=np.float32).reshape(3, 4), np.ones(5, dtype=np.float32)
    first, again, other = servers.input_file(x), servers.input_file(x), servers.input_file(w)
    assert first == again != other
    assert np.array_equal(np.load(first), x) and oct(Path(first).stat().st_mode & 0o777) == "0o644"
    assert oct(Path(first).parent.stat().st_mode & 0o777) == "0o711"
    servers.close()
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_a_large_input_is_drawn_into_its_file(tmp_path, monkeypatch, dtype):
    """A large input is drawn straight into its input file (KernelServers.input_array, grader/problems/base.py
    inputs_into): X is the same array as drawn into memory (the class seed's stream: the old draw then cast), the
    file is np.save's byte for byte, 0600 until input_file names it (without writing it again), 0644 then, gone
    with the grading while the grader's array stays readable; without room for its blocks the input is plain
    memory and input_file writes it as before."""
    import mmap

    import numpy as np

    from grader import problems
    from grader.problems import conv2d as conv
    from grader.runner import KernelServers

    case = {"batch": 2, "in_channels": 8, "out_channels": 4, "height": 370, "width": 370, "kernel": 3, "pool": 1,
            "bias": "zeros", "dtype": dtype}
    rng = np.random.default_rng(5)
    old_w = rng.random((4, 8, 3, 3), dtype=np.float32).astype(dtype)
    old_seed = int(rng.integers(0, 2**63))
    old_x = rng.random((2, 8, 370, 370), dtype=np.float32).astype(dtype)
    servers = KernelServers(target="trn2", limits=load_rubric(FAST_RUBRIC).limits, tmp_root=str(tmp_path))
    with problems.inputs_into(servers.input_array):
        x, w, bias_seed = conv.conv2d_data(case, 5)
    root = x
    while isinstance(root, np.ndarray | memoryview):
        root = root.base if isinstance(root, np.ndarray) else root.obj
    assert x.nbytes >= 4 << 20 and isinstance(root, mmap.mmap)  # a view of the file's map
    assert np.array_equal(x, old_x) and x.dtype == old_x.dtype and np.array_equal(w, old_w) and bias_seed == old_seed
    drawn = list(tmp_path.glob("**/in-*.npy"))
    assert len(drawn) == 1 and oct(drawn[0].stat().st_mode & 0o777) == "0o600"
    monkeypatch.setattr(np, "save", lambda *a, **k: pytest.fail("a drawn input was written again"))
    path = servers.input_file(x)
    monkeypatch.undo()
    assert Path(path) == drawn[0] and oct(drawn[0].stat().st_mode & 0o777) == "0o644"
    np.save(tmp_path / "saved.npy", old_x, allow_pickle=False)
    assert Path(path).read_bytes() == (tmp_path / "saved.npy").read_bytes()
    (tmp_path / "saved.npy").unlink()
    servers.close()
    assert not list(tmp_path.iterdir()) and np.array_equal(x, old_x)
    # no room for the file's blocks: plain memory, written by input_file as before
    servers = KernelServers(target="trn2", limits=load_rubric(FAST_RUBRIC).limits, tmp_root=str(tmp_path))

    def full(*_: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("os.posix_fallocate", full)
    with problems.inputs_into(servers.input_array):
        x2, _, _ = conv.conv2d_data(case, 5)
    assert x2.base is None and np.array_equal(x2, old_x) and not list(tmp_path.glob("**/in-*.npy"))
    assert Path(servers.input_file(x2)).read_bytes()[:10] == b"\x93NUMPY\x01\x00v\x00"
    servers.close()


# The import checks of the tests below: a module that escapes the Python restrictions (as LOOKS_AROUND does) and
# sleeps, or reports what a directory holds.
SLEEPS = _ESCAPE + '_sys().modules["time"].sleep({seconds})\n'
LOOKS_AT = _ESCAPE + '''
try:
    SEEN = sorted(_sys().modules["os"].listdir({path!r}))
except OSError as exc:
    SEEN = "unreadable: " + exc.strerror
raise RuntimeError("SEEN " + repr(SEEN))
'''


def _import_check(servers, tmp_path: Path, source: str, timeout_s: float = 20.0, functions: tuple[str, ...] = ()):
    from grader.runner import check_import

    limits = load_rubric(FAST_RUBRIC).limits
    return check_import(source.encode(), "probe.py", list(functions), backend="nkisim", target="trn2", limits=limits,
                        timeout_s=timeout_s, tmp_root=str(tmp_path), api="nki", servers=servers)


def test_calls_made_side_by_side_share_one_server(tmp_path):
    """One server per API serves the calls a grading makes side by side (grader/forkserver.py): a long call and a
    short one started after it run at once in forks of the same server, the short one's reply comes back first,
    and each call gets its own reply."""
    import threading
    import time

    from grader.runner import KernelServers

    servers = KernelServers(target="trn2", limits=load_rubric(FAST_RUBRIC).limits, tmp_root=str(tmp_path), size=2)
    done: dict[str, float] = {}

    def long_call():
        check = _import_check(servers, tmp_path, SLEEPS.format(seconds=2.5))
        done["long"] = time.perf_counter()
        assert check.verdict == "ok", check.message

    slow = threading.Thread(target=long_call)
    slow.start()
    time.sleep(0.8)
    short = _import_check(servers, tmp_path, LOOKS_AT.format(path="/"))
    done["short"] = time.perf_counter()
    slow.join()
    assert "SEEN [" in short.message, short.message
    assert done["short"] < done["long"]
    assert servers.started == 1 and servers.calls == 2 and servers.one_off == 0, vars(servers)
    servers.close()
    assert not list(tmp_path.iterdir())


@needs_namespaces
def test_a_call_cannot_see_the_directory_of_a_call_running_beside_it(tmp_path, monkeypatch):
    """A call forked while another runs has that call's job -- the paths of its directories -- in its memory (the
    server read it first): a call that runs the kernel's Python masks the directories of the calls its server runs
    (``mask_calls``), so a replay's inputs and outputs stay out of its reach.  Here the first call stands for a
    replay (its directory is registered as one's) and the second lists that directory: it finds it empty."""
    import threading
    import time

    from grader import sandbox
    from grader.runner import KernelServers

    served = sandbox.WarmServer.run
    first_dir: list[str] = []

    def run(self, job, **kw):
        if b"stands_for_a_replay" in job({}):  # the sleeping call: a stand-in for a replay, which runs no student code
            kw["student"] = False
            first_dir.append(kw["private_dir"])
        return served(self, job, **kw)

    monkeypatch.setattr(sandbox.WarmServer, "run", run)
    servers = KernelServers(target="trn2", limits=load_rubric(FAST_RUBRIC).limits, tmp_root=str(tmp_path), size=2)
    slow = threading.Thread(target=_import_check, args=(servers, tmp_path, SLEEPS.format(seconds=2.5)),
                            kwargs={"functions": ("stands_for_a_replay",)})
    slow.start()
    while not first_dir:
        time.sleep(0.01)
    time.sleep(0.3)
    assert sorted(p.name[:3] for p in Path(first_dir[0]).iterdir()) == ["in-", "lib", "out", "wor"]
    looks = _import_check(servers, tmp_path, LOOKS_AT.format(path=first_dir[0]))
    slow.join()
    assert "SEEN []" in looks.message, looks.message
    assert servers.started == 1, vars(servers)
    servers.close()


def test_a_killed_call_leaves_its_server_and_the_call_beside_it_running(tmp_path):
    """A call past its time limit is killed on the grader's word; the call running beside it in the same server
    ends normally, and the server serves the next call."""
    import threading

    from grader.runner import KernelServers

    servers = KernelServers(target="trn2", limits=load_rubric(FAST_RUBRIC).limits, tmp_root=str(tmp_path), size=2)
    got = {}
    beside = threading.Thread(target=lambda: got.setdefault("beside", _import_check(
        servers, tmp_path, SLEEPS.format(seconds=2.0))))
    beside.start()
    hung = _import_check(servers, tmp_path, SLEEPS.format(seconds=600), timeout_s=1.0)
    beside.join()
    assert hung.verdict == "failed" and hung.status == "timeout", (hung.verdict, hung.status, hung.message)
    assert got["beside"].verdict == "ok", got["beside"].message
    after = _import_check(servers, tmp_path, LOOKS_AT.format(path="/"))
    assert "SEEN [" in after.message, after.message
    assert servers.started == 1 and servers.one_off == 0, vars(servers)
    servers.close()
    assert not list(tmp_path.iterdir())


def test_the_server_reads_exactly_one_message_before_it_forks():
    """grader/forkserver.py reads a job's message and not a byte beyond it, so a job sent after it (another call's
    paths) is not in the memory of the fork it makes for the first."""
    import os
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "grader"))
    try:
        import forkserver
    finally:
        sys.path.pop(0)
    first = json.dumps({"id": 0, "job": {"out_dir": "/a"}}).encode()
    second = json.dumps({"id": 1, "job": {"out_dir": "/b"}}).encode()
    r, w = os.pipe()
    os.write(w, b"%d\n" % len(first) + first + b"%d\n" % len(second) + second)
    assert forkserver._read_message(r) == {"id": 0, "job": {"out_dir": "/a"}}
    assert os.read(r, 1 << 16) == b"%d\n" % len(second) + second
    os.close(r)
    os.close(w)


def test_the_server_starts_beside_the_static_screen(tmp_path, monkeypatch):
    """The server the import check forks is started while the static screen runs (``KernelServers.prestart``), not
    after it: the screen here waits until the grading's server is starting or started."""
    import time

    from grader import pipeline

    screened = pipeline._Grading.screen
    seen: list[bool] = []

    def screen(self):
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not (self.servers._starting or self.servers._servers):
            time.sleep(0.005)
        seen.append(bool(self.servers._starting or self.servers._servers))
        return screened(self)

    monkeypatch.setattr(pipeline._Grading, "screen", screen)
    record = _grade(tmp_path, GOOD, workers=1)
    assert seen == [True]
    assert record.timings["processes:started"] == 1, record.timings
    assert all(t.status == "passed" for t in record.tests), [t.message for t in record.tests]
