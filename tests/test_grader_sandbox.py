"""grader/sandbox.py on plain Python payloads: limits, time-outs, reaping, no network, bounded output."""

from __future__ import annotations

import os
import sys
import time

import pytest

from grader.rubric import Limits
from grader.sandbox import OUTPUT_TAIL_BYTES, detect_isolation, run_sandboxed

LIMITS = Limits(address_space_mib=1024, file_size_mib=16, processes=16, open_files=64, cpu_seconds_slack=2)


def _run(code: str, tmp_path, timeout: float = 10.0):
    os.chmod(tmp_path, 0o777)
    return run_sandboxed(
        [sys.executable, "-I", "-c", code], stdin_bytes=b"", cwd=str(tmp_path), limits=LIMITS, timeout_s=timeout
    )


def test_memory_limit(tmp_path):
    r = _run("x = bytearray(2 * 1024 ** 3)", tmp_path)
    assert r.returncode != 0 and "MemoryError" in r.output_tail


def test_wall_clock_limit_kills_a_sleeper(tmp_path):
    t0 = time.perf_counter()
    r = _run("import time; time.sleep(60)", tmp_path, timeout=2)
    assert r.timed_out and time.perf_counter() - t0 < 10


def test_cpu_limit_or_timeout_stops_a_spinner(tmp_path):
    r = _run("while True: pass", tmp_path, timeout=3)
    assert r.timed_out or r.signal_name in ("SIGXCPU", "SIGKILL")


@pytest.mark.skipif(
    not {"pid-namespace", "pids-cgroup"} & set(detect_isolation().features),
    reason="a setsid() grandchild can only be reaped with a PID namespace or a pids cgroup",
)
def test_daemonised_grandchild_is_reaped(tmp_path):
    beat = tmp_path / "heartbeat"
    code = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    for i in range(600):\n"
        f"        open({str(beat)!r}, 'w').write(str(i))\n"
        "        time.sleep(0.05)\n"
        "else:\n"
        "    time.sleep(0.5)\n"
    )
    r = _run(code, tmp_path)
    assert r.returncode == 0
    time.sleep(0.3)
    seen = beat.read_text()
    time.sleep(1.0)
    assert beat.read_text() == seen, "a daemonised grandchild outlived its run"


def test_fork_bomb_is_contained(tmp_path):
    code = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    t0 = time.perf_counter()
    r = _run(code, tmp_path, timeout=3)
    assert r.timed_out and time.perf_counter() - t0 < 20
    if "pids-cgroup" in detect_isolation().features:
        assert r.peak_processes is None or r.peak_processes <= LIMITS.processes, r.peak_processes
        leftovers = [d for d in os.listdir("/sys/fs/cgroup/pids") if d.startswith(f"asst4-grader-{os.getpid()}-")]
        assert not leftovers


@pytest.mark.skipif("network-namespace" not in detect_isolation().features, reason="no network namespace here")
def test_no_network(tmp_path):
    r = _run("import socket; socket.create_connection(('1.1.1.1', 53), timeout=3); print('CONNECTED')", tmp_path)
    assert "CONNECTED" not in r.output_tail and r.returncode != 0


def test_output_flood_keeps_only_a_tail(tmp_path):
    r = _run("import sys\nfor _ in range(20000): sys.stdout.write('y' * 1000 + '\\n')\nprint('END')", tmp_path)
    assert r.returncode == 0 and r.output_tail.rstrip().endswith("END")
    assert len(r.output_tail.encode()) <= OUTPUT_TAIL_BYTES


def test_environment_is_scrubbed(tmp_path, monkeypatch):
    monkeypatch.setenv("SECRET_TOKEN", "hunter2")
    r = _run("import os; print(sorted(os.environ))", tmp_path)
    assert "SECRET_TOKEN" not in r.output_tail and "HOME" in r.output_tail


def _clocked(code: str, tmp_path, timeout: float, startup: float = 60.0):
    os.chmod(tmp_path, 0o777)
    return run_sandboxed(
        [sys.executable, "-I", "-c", code],
        stdin_bytes=b"",
        cwd=str(tmp_path),
        limits=LIMITS,
        timeout_s=timeout,
        clock_file=str(tmp_path / "started"),
        startup_limit_s=startup,
    )


def test_clock_file_excludes_start_up_from_the_limit(tmp_path):
    # 3 s before the clock starts, then a quick exit: within a 1 s limit, because start-up does not count.
    r = _clocked("import time; time.sleep(3); open('started', 'w').close()", tmp_path, timeout=1)
    assert not r.timed_out and r.clock_started and r.returncode == 0


def test_clock_file_limit_applies_once_started(tmp_path):
    r = _clocked("import time; open('started', 'w').close(); time.sleep(60)", tmp_path, timeout=1)
    assert r.timed_out and r.clock_started and r.wall_seconds < 30


def test_clock_file_never_written_hits_the_start_up_limit(tmp_path):
    r = _clocked("import time; time.sleep(60)", tmp_path, timeout=1, startup=2)
    assert r.timed_out and not r.clock_started and r.wall_seconds < 30


def test_the_child_stops_numpys_clock_and_only_numpys():
    """S8: NumPy's datetime parser is the one wall clock student code can reach ('now', 'today', also through a dtype
    spelt at run time, which no screen sees); the child points NumPy's imports of time() at a clock stopped at the
    epoch before student code exists.  Python's own clocks (the child's timings, the grader's) keep running.  Before,
    'now' was the wall clock's second."""
    import subprocess

    code = (
        "import sys, time; sys.path.insert(0, 'grader'); import child, numpy as np\n"
        "real = int(str(np.datetime64('now'))[:4])\n"
        "print(child._stop_numpy_clock())\n"
        "word = ''.join(map(chr, (110, 111, 119)))\n"
        "print(real, str(np.datetime64(word)), str(np.array([word]).astype('M8[ms]')[0]), str(np.datetime64('today')),"
        " time.time() > 1e9, np.datetime64('2026-11-29') + 1)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__)))).stdout.split("\n")
    assert out[0] == "['numpy-clock-stopped']", out
    real, now, now_ms, today, python_clock, later = out[1].split()
    assert int(real) >= 2025 and python_clock == "True" and later == "2026-11-30"
    assert (now, now_ms, today) == ("1970-01-01T00:00:00", "1970-01-01T00:00:00.000", "1970-01-01")


def test_the_warm_server_finds_numpys_clock_slots_once_before_it_forks(tmp_path):
    """Finding the slots parses NumPy's 10 MB library (10-15 ms and, read whole, 10 MB of fresh memory per kernel
    process): the warm kernel server does it once while it pre-imports, and a call (a fork of it) stops the clock
    from the answer it inherits without opening the library; a file that changes is parsed again."""
    import subprocess

    code = (
        "import os, shutil, sys; sys.path.insert(0, 'grader'); import child, forkserver, numpy as np\n"
        f"forkserver._preimport(child, {str(tmp_path)!r}, 'nki')\n"
        "path = child._numpy_umath_path()\n"
        "assert path in [key[0] for key in child._SLOTS_SEEN], child._SLOTS_SEEN\n"
        "import nkisim.stream\n"
        "assert list(nkisim.stream._LIB) == ['nki'], nkisim.stream._LIB.keys()  # the names table too\n"
        "whole = child._elf_import_slots(path, child._CLOCK_SYMBOLS)\n"
        "assert whole == child._clock_slots(path) and whole[0].get('time'), whole\n"
        "def refuse(*a): raise AssertionError('parsed again')\n"
        "real, child._elf_import_slots = child._elf_import_slots, refuse\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    stopped = child._stop_numpy_clock()\n"
        "    ok = stopped == ['numpy-clock-stopped'] and str(np.datetime64('now')).startswith('1970')\n"
        "    os._exit(0 if ok else 1)\n"
        "assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0\n"
        f"copy = shutil.copy(path, {str(tmp_path / 'copy.so')!r})\n"
        "child._elf_import_slots = real\n"
        "assert child._clock_slots(copy) == whole\n"
        "with open(copy, 'r+b') as fh: fh.seek(0); fh.write(b'\\0')\n"
        "os.utime(copy, ns=(0, 12345))  # a changed file, whatever the clock's granularity\n"
        "try:\n"
        "    child._clock_slots(copy)\n"
        "except ValueError:\n"
        "    print('reparsed')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["reparsed"], out.stdout


@pytest.mark.skipif(not detect_isolation().unshare_argv, reason="needs mount namespaces")
def test_the_jail_leaves_every_visible_mount_read_only_but_the_runs_own(tmp_path):
    """The jail remounts read-only every mount that is not already so (a mask, one per private directory the grader
    knows, is read-only from the start and is not remounted): whatever was skipped, the mount a path reaches (the top
    one of a stack) is read-only for every mount point but the run's work and output directories, and a masked
    directory is empty."""
    import subprocess

    work, out, private = tmp_path / "work", tmp_path / "out", tmp_path / "private"
    for d in (work, out, private):
        d.mkdir()
    (private / "seed").write_text("42")
    code = (
        "import os, sys; sys.path.insert(0, 'grader'); import child\n"
        f"print(child._jail([{str(work)!r}, {str(out)!r}], [{str(private)!r}]))\n"
        "top = {}\n"
        "for line in open('/proc/self/mountinfo'):\n"
        "    f = line.split(); top[child._unescape(f[4])] = 'ro' in f[5].split(',')\n"
        "print(sorted(p for p, ro in top.items() if not ro), os.listdir(" + repr(str(private)) + "))\n"
    )
    argv = [*detect_isolation().unshare_argv, sys.executable, "-c", code]
    got = subprocess.run(argv, capture_output=True, text=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert got.returncode == 0, got.stderr
    features, writable = got.stdout.splitlines()
    assert "grader-files-hidden" in features and "read-only-fs" in features, features
    assert writable == repr(sorted([str(work), str(out)])) + " []", writable
