"""What a specialization costs, against an older nkisim, as paired CPU times (a benchmark that prints figures, not a
test):

    python tools/specialize_bench.py [--base REV] [--pairs 3] [--only staff,staff-legacy,...]

A specialization is the grader's specializing child's work (grader/child.py ``_specialize``): the kernel's Python
run once in timing mode on stand-ins (zero arrays of the call's shapes and dtypes) with an ``nkisim.stream.Recorder``,
then the stream written as bytes (``stream.dumps``).  Each run is a fresh process that imports nkisim and the kernel,
then times the recording and the serialization (``time.process_time``) and prints the instruction count and the
stream's size; the kernels are this checkout's files on both sides, so only nkisim differs.  Per workload it prints
the median CPU seconds of each side, CPU us per recorded instruction and the median (and range) of the per-pair
ratios this/base; the two sides must record byte-identical streams (the code table's file names aside: the script
says so when they do not).

Workloads (``--only``): the staff conv of both editions (grader/reference/part2/conv2d.py and its legacy twin) on the
batch-4 224x224 correctness shape (part2.large) and the batch-1 one (part2.perf_fp32), and the handout's starting
point of both editions (staff/ladder/step0_naive_nki.py, staff/ladder/conv_ladder.py ``step0_naive``) at batch 1.
The base checkout is exported as tools/paired_bench.py exports it (``git archive`` into ``--cache``).

``calls`` (in ``--only``, not run by default) is a kernel process's fixed cost instead: the staff conv's smallest
timed call (part2.ec_fp32: batch 1, 256 channels, 32x16; 94 instructions) specialized ``CALLS`` times as a grading
makes it (``grader.runner``: a fork of a warm kernel server per call, its jail, its stream written and read back),
with that side's grader and nkisim.  Per call: the CPU seconds and page faults of the whole process tree (the
bench's process, the server and its forks), from one process making ``CALLS + 1`` calls less one making 1 (the
server's start-up cancels).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from paired_bench import PINNED, ROOT, env_for, prepare_sides  # noqa: E402

# name -> (kernel file of this checkout, function, batch, pool)
WORKLOADS = {
    "staff-b4": ("grader/reference/part2/conv2d.py", "fused_conv2d_maxpool", 4, 1),
    "staff-b1": ("grader/reference/part2/conv2d.py", "fused_conv2d_maxpool", 1, 1),
    "staff-legacy-b4": ("grader/reference/legacy/part2/conv2d.py", "fused_conv2d_maxpool", 4, 1),
    "staff-legacy-b1": ("grader/reference/legacy/part2/conv2d.py", "fused_conv2d_maxpool", 1, 1),
    "naive-b1": ("staff/ladder/step0_naive_nki.py", "fused_conv2d_maxpool", 1, 1),
    "naive-legacy-b1": ("staff/ladder/conv_ladder.py", "step0_naive", 1, 1),
}


def child(path: str, function: str, batch: int, pool: int) -> None:
    """One specialization (in a fresh process): prints a JSON line of its figures."""
    import importlib.util

    import numpy as np

    from nkisim import stream
    from nkisim.core.runtime import run_kernel

    spec = importlib.util.spec_from_file_location("specialize_bench_kernel", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    kernel = getattr(mod, function)
    args = [np.zeros((batch, 256, 224, 224), np.float32), np.zeros((256, 256, 3, 3), np.float32),
            np.zeros(256, np.float32)]
    t0 = time.process_time()
    rec = stream.Recorder()
    run = run_kernel(kernel, args, {"pool_size": pool}, mode="timing", target="trn2", stream=rec, graded=True)
    t1 = time.process_time()
    data = rec.data()
    blob = stream.dumps(data)
    t2 = time.process_time()
    root = str(ROOT) + os.sep
    data["codes"] = [[f.removeprefix(root), name] for f, name in data["codes"]]
    print(json.dumps({"instrs": len(run.trace), "record": t1 - t0, "dumps": t2 - t1, "bytes": len(blob),
                      "sha": hashlib.sha256(stream.dumps(data)).hexdigest()}))


CALLS = 30
SMALL = [[1, 256, 32, 16], [256, 256, 3, 3], [256]]  # part2.ec_fp32's shapes


def calls_child(n: int) -> None:
    """``n`` specializations through one warm server (in a fresh process): prints the tree's CPU and faults."""
    import resource

    import numpy as np

    from grader import runner
    from grader.problems.base import Invocation
    from grader.rubric import load_rubric

    limits = load_rubric().limits
    source = (ROOT / WORKLOADS["staff-b1"][0]).read_bytes()
    inv = Invocation(args=[np.zeros(s, np.float32) for s in SMALL], kwargs={"pool_size": 1}, out_shape=(1,),
                     out_dtype=np.dtype(np.float32), flops=0.0)
    servers = runner.KernelServers(target="trn2", limits=limits)
    try:
        for _ in range(n):
            run = runner._specialized(source, "part2/conv2d.py", "fused_conv2d_maxpool", inv, backend="nkisim",
                                      target="trn2", api="nki", limits=limits, tmp_root=None, import_clock=False,
                                      hidden=(), servers=servers, timeout_s=120.0)
            if run.verdict != "ok":
                raise SystemExit(f"specialize_bench: the call failed: {run.message}")
    finally:
        servers.close()
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    print(json.dumps({"cpu": me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime,
                      "faults": me.ru_minflt + kids.ru_minflt}))


def timed_calls(repo: Path) -> dict:
    """One call's CPU seconds and page faults (``CALLS + 1`` calls less 1 call, each in a process of its own)."""
    got = []
    for n in (1, CALLS + 1):
        out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--calls-child", str(n)],
                             env=env_for(repo), capture_output=True, text=True, cwd=str(ROOT))
        if out.returncode != 0:
            raise SystemExit(f"specialize_bench: calls ({repo}) failed:\n{out.stderr[-2000:]}")
        got.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return {k: (got[1][k] - got[0][k]) / CALLS for k in ("cpu", "faults")}


def timed(repo: Path, name: str) -> dict:
    if name == "calls":
        return timed_calls(repo)
    path, function, batch, pool = WORKLOADS[name]
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(ROOT / path), function, str(batch), str(pool)]
    out = subprocess.run(cmd, env=env_for(repo), capture_output=True, text=True, cwd=str(ROOT))
    if out.returncode != 0:
        raise SystemExit(f"specialize_bench: {name} ({repo}) failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
        return 0
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--calls-child":
        calls_child(int(sys.argv[2]))
        return 0
    ap = argparse.ArgumentParser(prog="python tools/specialize_bench.py", description=__doc__.splitlines()[0])
    ap.add_argument("--base", default=PINNED, help=f"the commit to compare with (default {PINNED[:12]})")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--only", default=",".join(WORKLOADS),
                    help=f"comma-separated of {', '.join(WORKLOADS)}, calls (a kernel process's fixed cost)")
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "nkisim-paired-bench")
    args = ap.parse_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    for n in names:
        if n not in WORKLOADS and n != "calls":
            ap.error(f"unknown workload {n!r} ({', '.join(WORKLOADS)})")
    if args.pairs < 1:
        ap.error("--pairs must be at least 1")
    sides, load0, t0 = prepare_sides(args.base, args.cache)
    res: dict[tuple[str, str], list[dict]] = {(s, n): [] for s in sides for n in names}
    for i in range(args.pairs):
        for n in names:
            for s in (("base", "this") if i % 2 == 0 else ("this", "base")):
                res[(s, n)].append(timed(sides[s], n))
            a, b = res[("this", n)][-1], res[("base", n)][-1]
            if n == "calls":
                print(f"pair {i + 1}/{args.pairs} {n}: this {a['cpu'] * 1e3:.1f} ms, base {b['cpu'] * 1e3:.1f} ms "
                      "per call", file=sys.stderr, flush=True)
                continue
            print(f"pair {i + 1}/{args.pairs} {n}: this {a['record'] + a['dumps']:.3f} CPU s, base "
                  f"{b['record'] + b['dumps']:.3f} CPU s", file=sys.stderr, flush=True)
    print(f"specializations (record + dumps, CPU s), {args.pairs} pairs; base {sides['base'].name[:12]}; load average "
          f"{load0:.1f} -> {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs, {time.perf_counter() - t0:.0f} s wall")
    for n in names:
        this, old = res[("this", n)], res[("base", n)]
        if n == "calls":
            med = statistics.median
            ratios = sorted(a["cpu"] / b["cpu"] for a, b in zip(this, old))
            print(f"  {n:16s} {CALLS} small specializations through a warm server, per call: this "
                  f"{med([r['cpu'] for r in this]) * 1e3:.1f} ms CPU, {med([r['faults'] for r in this]):.0f} page "
                  f"faults; base {med([r['cpu'] for r in old]) * 1e3:.1f} ms, {med([r['faults'] for r in old]):.0f}; "
                  f"this/base {med(ratios):.3f} ({ratios[0]:.3f}-{ratios[-1]:.3f})")
            continue
        k = this[0]["instrs"]
        tot = [r["record"] + r["dumps"] for r in this]
        tot_b = [r["record"] + r["dumps"] for r in old]
        ratios = sorted(a / b for a, b in zip(tot, tot_b))
        med = statistics.median
        print(f"  {n:16s} {k:6d} instrs, {this[0]['bytes'] / 1e6:.2f} MB: this {med(tot):.3f} CPU s "
              f"({med(tot) / k * 1e6:.1f} us/instr; record {med([r['record'] for r in this]):.3f}, dumps "
              f"{med([r['dumps'] for r in this]):.3f}), base {med(tot_b):.3f} ({med(tot_b) / k * 1e6:.1f} us/instr; "
              f"record {med([r['record'] for r in old]):.3f}, dumps {med([r['dumps'] for r in old]):.3f}); "
              f"this/base {med(ratios):.3f} ({ratios[0]:.3f}-{ratios[-1]:.3f})")
        if {r["sha"] for r in this} != {r["sha"] for r in old} or len({r["sha"] for r in this}) != 1:
            print(f"  {n:16s} STREAMS DIFFER: this {sorted({r['sha'][:12] for r in this})}, base "
                  f"{sorted({r['sha'][:12] for r in old})}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
