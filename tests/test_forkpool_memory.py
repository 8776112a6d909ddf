"""The Part 2 harness's default ``--jobs`` is memory-aware: no more workers (about 1.1 GB each) than the memory left
holds, read from /proc/meminfo and the memory cgroup (v1 or v2) the process runs in (nkibench/forkpool.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from nkibench import forkpool

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "part2"))
import test_harness as harness  # noqa: E402

GIB = 2**30


def _fake_machine(tmp_path: Path, *, available_kib: int, cgroup_line: str, files: dict[str, str]) -> tuple[str, str]:
    """A /proc (meminfo, self/cgroup) and a /sys/fs/cgroup tree holding ``files`` (path -> text)."""
    proc, cg = tmp_path / "proc", tmp_path / "cgroup"
    (proc / "self").mkdir(parents=True)
    (proc / "meminfo").write_text(f"MemTotal:       32000000 kB\nMemFree:         1000000 kB\n"
                                  f"MemAvailable:   {available_kib} kB\n")
    (proc / "self" / "cgroup").write_text(cgroup_line + "\n")
    for rel, text in files.items():
        (cg / rel).parent.mkdir(parents=True, exist_ok=True)
        (cg / rel).write_text(text)
    return str(proc), str(cg)


def test_memory_available_is_meminfo_without_a_limiting_cgroup(tmp_path):
    proc, cg = _fake_machine(tmp_path, available_kib=8 * 2**20, cgroup_line="0::/user.slice",
                             files={"user.slice/memory.max": "max\n", "user.slice/memory.current": "123\n",
                                    "cgroup.controllers": "cpu memory\n"})
    assert forkpool.memory_available(proc, cg) == 8 * GIB
    assert forkpool.memory_available(str(tmp_path / "none"), str(tmp_path / "none")) is None


def test_a_cgroup_v2_limit_lower_than_the_machines_memory_wins(tmp_path):
    """A container (or a Slurm job) limited to 3 GiB using 1.5 GiB, 0.5 GiB of it page cache it may drop: 2 GiB
    left, whatever the machine has free; an ancestor's tighter limit counts too."""
    stat = "anon 1000\ninactive_file 536870912\nactive_file 0\n"
    proc, cg = _fake_machine(tmp_path, available_kib=20 * 2**20, cgroup_line="0::/job/step",
                             files={"cgroup.controllers": "cpu memory\n",
                                    "job/step/memory.max": f"{3 * GIB}\n",
                                    "job/step/memory.current": f"{GIB + GIB // 2}\n",
                                    "job/step/memory.stat": stat,
                                    "job/memory.max": "max\n", "job/memory.current": "5\n"})
    assert forkpool.memory_available(proc, cg) == 2 * GIB
    (tmp_path / "cgroup" / "job" / "memory.max").write_text(f"{GIB}\n")
    (tmp_path / "cgroup" / "job" / "memory.current").write_text(f"{GIB // 4}\n")
    assert forkpool.memory_available(proc, cg) == GIB - GIB // 4


def test_a_cgroup_v1_limit_and_its_no_limit_value(tmp_path):
    """cgroup v1 (a hybrid host: v2 mounted at unified/ without the memory controller): memory.limit_in_bytes; the
    kernel's 'no limit' (2^63 - 4096) is none.  A container sees its own cgroup as the mount's root while
    /proc/self/cgroup names the host's path: the root is read."""
    proc, cg = _fake_machine(tmp_path, available_kib=20 * 2**20,
                             cgroup_line="4:memory:/docker/abc\n0::/",
                             files={"memory/memory.limit_in_bytes": f"{4 * GIB}\n",
                                    "memory/memory.usage_in_bytes": f"{GIB}\n",
                                    "memory/memory.stat": f"total_inactive_file {GIB // 2}\n",
                                    "unified/cgroup.controllers": "\n"})
    assert forkpool.memory_available(proc, cg) == 4 * GIB - GIB // 2
    (tmp_path / "cgroup" / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    assert forkpool.memory_available(proc, cg) == 20 * GIB


@pytest.mark.skipif(not forkpool.available(), reason="the harness forks workers on Linux only")
def test_default_jobs_follow_cores_and_memory(monkeypatch):
    kernel = harness.load_kernel(REPO / "part2" / "conv2d.py")
    monkeypatch.setattr(forkpool, "usable_cores", lambda: 8)
    assert harness.default_jobs(kernel, available=64 * GIB) == 4  # the cap: three large runs
    need = harness.PARENT_BYTES + 2 * harness.WORKER_BYTES
    assert harness.default_jobs(kernel, available=need) == 2
    assert harness.default_jobs(kernel, available=need - 1) == 1
    assert harness.default_jobs(kernel, available=GIB // 2) == 1  # never none: the serial path needs no worker
    monkeypatch.setattr(forkpool, "memory_available", lambda: 3 * harness.WORKER_BYTES + harness.PARENT_BYTES)
    assert harness.default_jobs(kernel) == 3
    monkeypatch.setattr(forkpool, "memory_available", lambda: None)  # unreadable: cores only
    monkeypatch.setattr(forkpool, "usable_cores", lambda: 2)
    assert harness.default_jobs(kernel) == 2


def test_the_help_text_says_the_default_is_memory_aware(capsys):
    with pytest.raises(SystemExit):
        harness.parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "no more than the available memory holds at about 1.1 GB each" in text
