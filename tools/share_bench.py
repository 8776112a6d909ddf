"""The grader's three batch-4 correctness calls of a conv kernel replayed as one lockstep group against each alone.

    python tools/share_bench.py [--size 224] [--batch 4] [--pairs 1] [--prefix] [--kernel PATH]
                                [--only both|alone|group|cross] [--hbm-files]

Records the kernel's programs for ``large`` (zero bias, no pooling), ``bias`` and ``maxpool`` (pool size 2) on one X
and W, as the grader does (docs/grading.md, "Correctness calls replayed together"), then replays them alone
(``nkisim.stream.replay``, one after another) and as one group (``replay_group``), alternately, and prints each
side's CPU seconds (the process's, every thread), the group's reused and computed products and how many bitwise
compares it made (calls of ``core.sharing.same_bits`` and the bytes they read on each side).  ``--prefix`` adds the
batch-1 timed call's member (X's first image, the grader's batch prefix) first in the group.  Every grouped output
is checked bit for bit against its separate replay; a difference is an error.  A figure to compare between trees,
not a test: the machine's load is printed with it.

``--only cross`` replays the group as the grader's ``GRADER_CROSS_GROUP=1`` makes it (docs/grading.md, round 9):
``large`` and ``bias`` in a forked process publishing the leader's products through a channel file, ``maxpool``
(and the prefix member, last) in this one taking them, side by side; it prints the wall time from the fork to both
ends and each process's CPU seconds.  ``--only group`` prints the one group's wall time too.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nkisim import stream  # noqa: E402
from nkisim.core import channel, sharing  # noqa: E402


def _kernel(path: Path):
    spec = importlib.util.spec_from_file_location("share_bench_kernel", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod.fused_conv2d_maxpool


def _members(fn, batch: int, size: int, channels: int, prefix: bool) -> list:
    rng = np.random.default_rng(7)
    x = rng.random((batch, channels, size, size), dtype=np.float32)
    w = rng.random((channels, channels, 3, 3), dtype=np.float32)
    bias = rng.random(channels, dtype=np.float32)
    calls = [([x, w, np.zeros(channels, np.float32)], {"pool_size": 1}),
             ([x, w, bias], {"pool_size": 1}),
             ([x, w, bias], {"pool_size": 2})]
    if prefix:
        calls.insert(0, ([x[:1].copy(), w, bias], {"pool_size": 1}))
    out = []
    for args, kwargs in calls:
        data, _ = stream.record(fn, args, kwargs)
        out.append((stream.loads(stream.dumps(data)), args, kwargs))
    return out


class _Counter:
    """Counts ``same_bits`` calls and the bytes they read (both sides)."""

    def __init__(self) -> None:
        self.calls = 0
        self.nbytes = 0
        self.inner = sharing.same_bits

    def __call__(self, a: np.ndarray, b: np.ndarray) -> bool:
        self.calls += 1
        self.nbytes += a.nbytes + b.nbytes
        return self.inner(a, b)


def _cross(members: list, prefix: bool, pair: int) -> None:
    """The group in two processes sharing the leader's products (``--only cross``)."""
    lead = members[1:3] if prefix else members[:2]
    rest = members[3:] + members[:1] if prefix else members[2:]
    tmp = tempfile.mkdtemp(dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    try:
        path = os.path.join(tmp, "channel")
        channel.create(path)
        w0 = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                _, fig = stream.replay_group(lead, link=channel.open_channel(path, "producer"))
                each = ", ".join(f"{s:.2f}" for s in fig["cpu_seconds"])
                print(f"pair {pair + 1}: producer members {each}; computed {fig['misses']}, reused {fig['hits']}, "
                      f"waited {fig['channel_wait']:.2f} s", flush=True)
                code = 0 if fig["misses"] else 1
            finally:
                os._exit(code)
        c0 = time.process_time()
        got, fig = stream.replay_group(rest, link=channel.open_channel(path, "consumer"))
        tc = time.process_time() - c0
        _, status, usage = os.wait4(pid, 0)
        wall = time.perf_counter() - w0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for g in got:
        if isinstance(g, BaseException):
            raise g
    each = ", ".join(f"{s:.2f}" for s in fig["cpu_seconds"])
    print(f"pair {pair + 1}: cross {wall:.2f} s wall; producer process {usage.ru_utime + usage.ru_stime:.2f} CPU s "
          f"(exit {status >> 8}), consumer {tc:.2f} CPU s (members {each}; reused {fig['hits']}, computed "
          f"{fig['misses']}, waited {fig['channel_wait']:.2f} s) (load {os.getloadavg()[0]:.2f})", flush=True)


def _hbm_files(members: list, pairs: int) -> None:
    """The group as the grader's replay runs it (``hbm_dirs`` on /dev/shm where it is a tmpfs): each member's HBM
    tensors of 1 MiB or more are files, made and poisoned by the member (``own``) or, for its output, prepared
    beforehand and taken (``prepared``: grader/runner.py ``KernelServers.prepare_outputs``, not timed); the group's
    user and system CPU seconds (this process, every thread), alternating.  Outputs compared bit for bit."""
    from nkisim.core import buffers

    root = "/dev/shm" if os.path.isdir("/dev/shm") else None
    want = None
    for pair in range(pairs):
        for side in ("own", "prepared"):
            base = tempfile.mkdtemp(prefix="share-bench-", dir=root)
            dirs = [os.path.join(base, f"m{k}") for k in range(len(members))]
            try:
                for k, d in enumerate(dirs):
                    os.makedirs(d)
                    if side == "prepared":
                        shape, dtype = _out_spec(members[k])
                        if int(np.prod(shape)) * np.dtype(dtype).itemsize >= buffers.HBM_FILE_BYTES:
                            buffers.write_ready_file(os.path.join(d, buffers.ready_file_name(shape, dtype)),
                                                     shape, dtype)
                time.sleep(1.0)
                r0, w0 = os.times(), time.perf_counter()
                runs, _ = stream.replay_group(members, hbm_dirs=dirs)
                r1, w1 = os.times(), time.perf_counter()
                for g in runs:
                    if isinstance(g, BaseException):
                        raise g
                got = [hashlib.sha256(g.outputs.view(np.uint8)).hexdigest() for g in runs]
                left = [f for d in dirs for f in os.listdir(d) if f.startswith(buffers.READY_PREFIX)]
                del runs
            finally:
                shutil.rmtree(base, ignore_errors=True)
            if want is None:
                want = got
            elif got != want:
                print("DIFFERENT OUTPUTS", file=sys.stderr)
                return 1
            print(f"pair {pair + 1} {side:8s}: user {r1.user - r0.user:.2f} sys {r1.system - r0.system:.2f} CPU s, "
                  f"{w1 - w0:.2f} s wall{'; prepared files not taken: ' + str(left) if left else ''} "
                  f"(load {os.getloadavg()[0]:.2f})", flush=True)
    print("outputs identical on both sides (bitwise)")
    return 0


def _out_spec(member) -> tuple:
    """(shape, dtype) of a member's conv output: [batch, C_out, H - K + 1, W - K + 1] pooled, X's dtype."""
    _, (x, w, _), kw = member
    pool = int(kw.get("pool_size", 1))
    ho, wo = x.shape[2] - w.shape[2] + 1, x.shape[3] - w.shape[3] + 1
    return (x.shape[0], w.shape[0], ho // pool, wo // pool), x.dtype


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--channels", type=int, default=256)
    ap.add_argument("--pairs", type=int, default=1)
    ap.add_argument("--prefix", action="store_true", help="a batch-1 member (X's first image) first in the group")
    ap.add_argument("--kernel", type=Path, default=ROOT / "grader/reference/part2/conv2d.py")
    ap.add_argument("--only", choices=("both", "alone", "group", "cross"), default="both")
    ap.add_argument("--hbm-files", action="store_true",
                    help="instead: the group replayed with its HBM tensors in files (the grader's replays), each "
                         "pair once making its own files and once taking output files prepared beforehand")
    ns = ap.parse_args()
    members = _members(_kernel(ns.kernel), ns.batch, ns.size, ns.channels, ns.prefix)
    print(f"{ns.kernel.name}: {len(members)} members, batch {ns.batch}, {ns.size}x{ns.size}, "
          f"{ns.channels} channels{' (first: batch-1 prefix)' if ns.prefix else ''}; load {os.getloadavg()[0]:.2f}")
    if ns.hbm_files:
        return _hbm_files(members, ns.pairs)
    for pair in range(ns.pairs):
        alone = None
        if ns.only in ("both", "alone"):
            t0 = time.process_time()
            alone = [stream.replay(s, [a.copy() for a in args], dict(kw)) for s, args, kw in members]
            ta = time.process_time() - t0
            print(f"pair {pair + 1}: alone {ta:.2f} CPU s (load {os.getloadavg()[0]:.2f})", flush=True)
        if ns.only == "cross":
            _cross(members, ns.prefix, pair)
            continue
        if ns.only in ("both", "group"):
            counter = _Counter()
            sharing.same_bits = counter
            try:
                t0, w0 = time.process_time(), time.perf_counter()
                grouped, figures = stream.replay_group(members)
                tg = time.process_time() - t0
                print(f"pair {pair + 1}: grouped {time.perf_counter() - w0:.2f} s wall", flush=True)
            finally:
                sharing.same_bits = counter.inner
            stats = figures.get("compares")
            each = ", ".join(f"{s:.2f}" for s in figures["cpu_seconds"])
            print(f"pair {pair + 1}: grouped {tg:.2f} CPU s (members {each}); "
                  f"products reused {figures['hits']}, computed {figures['misses']}; same_bits calls "
                  f"{counter.calls}, {counter.nbytes / 1e9:.2f} GB read{'; ' + str(stats) if stats else ''} "
                  f"(load {os.getloadavg()[0]:.2f})", flush=True)
            for g in grouped:
                if isinstance(g, BaseException):
                    raise g
            if alone is not None:
                for a, g in zip(alone, grouped, strict=True):
                    if not np.array_equal(a.outputs.view(np.uint8), g.outputs.view(np.uint8)):
                        print("DIFFERENT OUTPUTS", file=sys.stderr)
                        return 1
                print("grouped outputs identical to the separate replays (bitwise)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
