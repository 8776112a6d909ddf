"""grader/scratch.py: the grader's temporary directories carry their owner, and a grading removes at start-up those
whose owner died without removing them (SIGKILL), never a live grading's, another user's or another PID namespace's.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from grader import scratch

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(scratch.owner_tag() is None, reason="needs /proc (Linux)")


def _tag(pid: int | None = None, started: int | None = None, boot: str | None = None, ns: int | None = None) -> str:
    """An owner tag like :func:`scratch.owner_tag`'s, with any field replaced."""
    my_boot, my_ns, my_pid, my_start = scratch.owner_tag().split(".")
    return (f"{boot or my_boot}.{ns if ns is not None else my_ns}.{pid if pid is not None else my_pid}."
            f"{started if started is not None else my_start}")


def _dir(tmp: Path, kind: str, tag: str) -> Path:
    d = tmp / f"asst4-{kind}-{tag}-ab12_x9z"
    d.mkdir()
    (d / "work").mkdir()
    (d / "work" / "kernels.py").write_text("x = 1\n")
    return d


def _child_that_makes_dirs(tmp: Path, then: str) -> subprocess.Popen:
    """A Python process that makes one directory of each kind in ``tmp`` with scratch.make_dir, prints their
    paths, then ``then`` ('exit': returns without removing them, 'sleep': waits to be killed)."""
    code = textwrap.dedent(f"""
        import sys, time
        from grader import scratch
        for kind in scratch.KINDS:
            print(scratch.make_dir(kind, {str(tmp)!r}), flush=True)
        print("made", flush=True)
        if {then!r} == "sleep":
            time.sleep(600)
    """)
    return subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.PIPE, text=True)


def _made(proc: subprocess.Popen) -> list[Path]:
    paths = []
    for line in proc.stdout:
        if line.strip() == "made":
            return paths
        paths.append(Path(line.strip()))
    raise AssertionError("the child made no directories")


def test_names_carry_the_owner_and_match_the_reapers_pattern(tmp_path):
    for kind in scratch.KINDS:
        d = scratch.make_dir(kind, str(tmp_path))
        m = scratch.NAME.fullmatch(d.name)
        assert m and m.group(1) == kind and d.is_dir() and (d.stat().st_mode & 0o777) == 0o700
        assert int(m.group(4)) == os.getpid()
    with pytest.raises(ValueError, match="unknown scratch directory kind"):
        scratch.make_dir("cache", str(tmp_path))
    # this process's own directories are in use: never stale
    assert scratch.stale_dirs(str(tmp_path)) == []


def test_a_dead_owners_directories_are_reaped_and_a_live_owners_kept_until_it_is_killed(tmp_path):
    exited = _child_that_makes_dirs(tmp_path, "exit")
    left = _made(exited)
    exited.wait(timeout=60)
    alive = _child_that_makes_dirs(tmp_path, "sleep")
    try:
        live = _made(alive)
        assert all(p.is_dir() for p in left + live)
        assert scratch.reap_stale(str(tmp_path), once=False) == sorted(left)
        assert not any(p.exists() for p in left) and all(p.is_dir() for p in live)
        alive.send_signal(signal.SIGKILL)
        alive.wait(timeout=60)
        assert scratch.reap_stale(str(tmp_path), once=False) == sorted(live)
    finally:
        if alive.poll() is None:
            alive.kill()
            alive.wait()
    assert list(tmp_path.iterdir()) == []


def test_only_provably_dead_owners_of_this_user_and_namespace_are_reaped(tmp_path):
    pid = os.getpid()
    reused = _dir(tmp_path, "case", _tag(pid=pid, started=1))  # our pid, another start time: a reused pid
    earlier_boot = _dir(tmp_path, "server", _tag(boot="0badb007"))
    other_ns = _dir(tmp_path, "case", _tag(ns=1, pid=999_999_999))  # another container's pid: unknown here
    mine = _dir(tmp_path, "inputs", _tag())
    untagged = tmp_path / "asst4-case-q1w2e3r4"  # an older grader's (no owner): left alone
    untagged.mkdir()
    not_a_dir = tmp_path / f"asst4-case-{_tag(pid=999_999_999)}-abcdefgh"
    not_a_dir.write_text("a file, not a directory")
    target = tmp_path / "target"
    target.mkdir()
    (target / "keep").write_text("kept")
    link = tmp_path / f"asst4-case-{_tag(boot='0badb007')}-linkxxxx"
    link.symlink_to(target, target_is_directory=True)
    assert scratch.stale_dirs(str(tmp_path)) == sorted([reused, earlier_boot])
    assert scratch.reap_stale(str(tmp_path), once=False) == sorted([reused, earlier_boot])
    assert all(p.exists() for p in (other_ns, mine, untagged, not_a_dir, link)) and (target / "keep").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a directory another user owns")
def test_another_users_directories_are_never_reaped(tmp_path):
    theirs = _dir(tmp_path, "case", _tag(boot="0badb007"))
    os.chown(theirs, 65534, 65534)
    assert scratch.reap_stale(str(tmp_path), once=False) == [] and theirs.is_dir()


def test_reaping_runs_once_per_root_per_process(tmp_path):
    stale = _dir(tmp_path, "case", _tag(boot="0badb007"))
    assert scratch.reap_stale(str(tmp_path)) == [stale]
    again = _dir(tmp_path, "case", _tag(boot="0badb008"))
    assert scratch.reap_stale(str(tmp_path)) == [] and again.is_dir()


def test_a_grading_removes_what_a_sigkilled_grading_left(tmp_path):
    """The case: a grader killed with SIGKILL (the OOM killer) leaves its run directories in the temp directory; the
    next grading that uses that directory removes them when it starts, and leaves none of its own."""
    from grader_helpers import HOSTILE

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp)}
    killed = subprocess.Popen(
        [sys.executable, "-m", "grader", "grade", str(HOSTILE / "infinite_loop"), "--out", str(tmp_path / "out1"),
         "--only", "part1.transpose"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not list(tmp.glob("asst4-case-*")) and time.monotonic() < deadline and killed.poll() is None:
        time.sleep(0.1)
    killed.send_signal(signal.SIGKILL)
    killed.wait(timeout=60)
    left = sorted(tmp.glob("asst4-*"))
    assert any(p.name.startswith("asst4-case-") for p in left), "the grader never started a case"
    assert all(scratch.NAME.fullmatch(p.name) for p in left), left
    done = subprocess.run(
        [sys.executable, "-m", "grader", "grade", str(ROOT / "grader" / "reference"), "--out", str(tmp_path / "out2"),
         "--only", "part1.transpose"], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert sorted(tmp.glob("asst4-*")) == []


def test_the_fast_root_is_taken_only_when_nobody_chose_a_temporary_directory(monkeypatch, tmp_path):
    """scratch.fast_root: the tmpfs for the replays' scratch only without a tmp_root and without TMPDIR/TEMP/TMP (a
    caller's choice wins), and only a tmpfs mount point with FAST_ROOT_MIN_FREE bytes free."""
    for key in ("TMPDIR", "TEMP", "TMP"):
        monkeypatch.delenv(key, raising=False)
    assert scratch.fast_root(str(tmp_path)) == str(tmp_path)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    assert scratch.fast_root(None) is None
    monkeypatch.delenv("TMPDIR")
    monkeypatch.setattr(scratch, "FAST_ROOT", str(tmp_path))  # a directory, not a tmpfs mount point
    assert scratch.fast_root(None) is None
    monkeypatch.setattr(scratch, "FAST_ROOT", "/dev/shm")
    if not scratch._is_tmpfs("/dev/shm"):
        pytest.skip("no tmpfs at /dev/shm")
    monkeypatch.setattr(scratch, "FAST_ROOT_MIN_FREE", 1 << 62)  # never that much free
    assert scratch.fast_root(None) is None
    monkeypatch.setattr(scratch, "FAST_ROOT_MIN_FREE", 0)
    assert scratch.fast_root(None) == "/dev/shm"


def test_a_replay_runs_in_the_fast_root_and_the_specialization_does_not(monkeypatch, tmp_path):
    """A call's replay (no student code) gets its case directory in the tmpfs, jail included, and computes the same
    outputs; the specializing child (student code) keeps the usual temporary directory; both are removed."""
    import tempfile

    import numpy as np
    from grader_helpers import FAST_RUBRIC

    import grader.runner as runner
    from grader import problems
    from grader.rubric import load_rubric

    if not scratch._is_tmpfs("/dev/shm"):
        pytest.skip("no tmpfs at /dev/shm")
    for key in ("TMPDIR", "TEMP", "TMP"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setattr(scratch, "FAST_ROOT_MIN_FREE", 0)
    usual = tmp_path / "tmp"
    usual.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(usual))
    made: list[tuple[str, str]] = []
    real = scratch.make_dir

    def spy(kind, tmp_root=None):
        d = real(kind, tmp_root)
        made.append((kind, str(d.parent)))
        return d

    monkeypatch.setattr(scratch, "make_dir", spy)
    inv = problems.make_invocation("transpose", {"shape": [256, 384], "dtype": "float32"}, 1)
    source = (ROOT / "grader" / "reference" / "part1" / "kernels.py").read_bytes()
    run = runner.run_case(source, "part1/kernels.py", "matrix_transpose", inv, mode="full", want_trace=True,
                          backend="nkisim", target="trn2", limits=load_rubric(FAST_RUBRIC).limits, timeout_s=60.0,
                          api="nki")
    assert run.verdict == "ok", run.message
    np.testing.assert_array_equal(run.outputs[0], inv.args[0].T)
    assert made == [("case", str(usual)), ("case", "/dev/shm")], made
    assert not list(usual.iterdir())
    assert not [p for p in Path("/dev/shm").glob(f"asst4-case-{scratch.owner_tag()}-*")]
