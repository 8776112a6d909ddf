"""The per-instruction path against a pinned older nkisim, as paired whole-process CPU times (a benchmark that
prints figures, not a test):

    python tools/paired_bench.py [--base REV] [--pairs 5] [--edition nki,legacy] [-n 25600]

Runs ``part1/run_benchmark.py --kernel tiled -n N`` (the handout's ROW_CHUNK=1 tiled vector add: one correctness
run with values, one timing run and the cost model, about 102,400 instructions each at N=25600) of each edition,
once with this checkout and once with ``--base`` (default: the 2026-11-26 main, PINNED, the reference of issue 35),
``--pairs`` times, alternating which one goes first.  Each run is a fresh process; its CPU seconds (user + system,
``os.wait4``) are the figure, because wall time on a shared machine follows the load.  Per edition it prints the
median CPU seconds of each side and the median (and range) of the per-pair ratios this/base: pairing cancels
most of the load drift, the median most of the rest.  Both sides must print the same modelled latency (the
script says so when they do not: a speed change must not move it).

The base checkout is exported with ``git archive`` into ``--cache`` (default /tmp/nkisim-paired-bench/<commit>)
and imported by putting it first on PYTHONPATH (the import fallback .pth of this environment then loads its
nkisim, checked before timing).  The legacy edition runs a copy of part1/run_benchmark.py next to that checkout's
editions/legacy/part1/kernels.py.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# main on 2026-11-26, before round 3 (`git log --before=2026-11-27 -1 main`): the reference of issue 35's target
PINNED = "3d048244cc3c8f6f7fd080b726d6ee50cb36f7d7"
LATENCY = re.compile(r"^Execution Time: .*$", re.M)


def export(rev: str, cache: Path) -> Path:
    """A clean copy of ``rev``'s tree (kept between runs, keyed by the full commit id)."""
    sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", f"{rev}^{{commit}}"], check=True,
                         capture_output=True, text=True).stdout.strip()
    dest = cache / sha
    if (dest / "nkisim" / "__init__.py").exists():
        return dest
    tmp = Path(tempfile.mkdtemp(prefix=f"{sha[:12]}-", dir=cache))
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", sha], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive, check=True)
    try:
        tmp.rename(dest)
    except OSError:  # another run exported it meanwhile
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def script_for(repo: Path, edition: str, scratch: Path) -> Path:
    """run_benchmark.py of ``repo`` next to that checkout's kernels of ``edition``."""
    if edition == "nki":
        return repo / "part1" / "run_benchmark.py"
    d = scratch / f"{repo.name}-{edition}" / "part1"
    d.mkdir(parents=True, exist_ok=True)
    shutil.copy(repo / "part1" / "run_benchmark.py", d / "run_benchmark.py")
    shutil.copy(repo / "editions" / edition / "part1" / "kernels.py", d / "kernels.py")
    return d / "run_benchmark.py"


def env_for(repo: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(repo)
    env.pop("NKISIM_TARGET", None)
    return env


def check_imports(repo: Path) -> None:
    out = subprocess.run([sys.executable, "-c", "import nkisim; print(nkisim.__file__)"], env=env_for(repo),
                         capture_output=True, text=True, check=True).stdout.strip()
    if not out.startswith(str(repo) + os.sep):
        raise SystemExit(f"paired_bench: with PYTHONPATH={repo} nkisim is imported from {out}: cannot time {repo}")


def prepare_sides(rev: str, cache: Path) -> tuple[dict[str, Path], float, float]:
    """The two trees to time ("this" and the exported ``rev``), each checked to import its own nkisim, with the load
    average and the clock at the start (shared by tools/specialize_bench.py)."""
    cache.mkdir(parents=True, exist_ok=True)
    sides = {"this": ROOT, "base": export(rev, cache)}
    for repo in sides.values():
        check_imports(repo)
    return sides, os.getloadavg()[0], time.perf_counter()


def timed(repo: Path, script: Path, n: int) -> tuple[float, str]:
    """(CPU seconds, modelled-latency line) of one run_benchmark process."""
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen([sys.executable, str(script), "--kernel", "tiled", "-n", str(n)], env=env_for(repo),
                                stdout=out, stderr=subprocess.STDOUT, cwd=str(script.parent))
        _, status, ru = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read().decode(errors="replace")
    if proc.returncode != 0 or "Correctness passed? True" not in text:
        raise SystemExit(f"paired_bench: {script} ({repo}) failed:\n{text[-2000:]}")
    m = LATENCY.search(text)
    return ru.ru_utime + ru.ru_stime, m.group(0) if m else "?"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python tools/paired_bench.py", description=__doc__.splitlines()[0])
    ap.add_argument("--base", default=PINNED, help=f"the commit to compare with (default {PINNED[:12]}, the "
                                                   "2026-11-26 main)")
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--edition", default="nki,legacy", help="comma-separated: nki (part1/kernels.py), legacy "
                                                            "(editions/legacy/part1/kernels.py)")
    ap.add_argument("-n", type=int, default=25600)
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "nkisim-paired-bench")
    args = ap.parse_args(argv)
    if args.pairs < 1:
        ap.error("--pairs must be at least 1")
    editions = [e.strip() for e in args.edition.split(",") if e.strip()]
    for e in editions:
        if e not in ("nki", "legacy"):
            ap.error(f"unknown edition {e!r} (nki, legacy)")
    sides, load0, t0 = prepare_sides(args.base, args.cache)
    with tempfile.TemporaryDirectory(prefix="paired-bench-") as scratch:
        scripts = {(s, e): script_for(repo, e, Path(scratch)) for s, repo in sides.items() for e in editions}
        cpu: dict[tuple[str, str], list[float]] = {k: [] for k in scripts}
        lat: dict[tuple[str, str], set[str]] = {k: set() for k in scripts}
        for i in range(args.pairs):
            for e in editions:
                order = ("base", "this") if i % 2 == 0 else ("this", "base")
                for s in order:
                    c, line = timed(sides[s], scripts[(s, e)], args.n)
                    cpu[(s, e)].append(c)
                    lat[(s, e)].add(line)
                print(f"pair {i + 1}/{args.pairs} {e}: this {cpu[('this', e)][-1]:.2f} CPU s, base "
                      f"{cpu[('base', e)][-1]:.2f} CPU s", file=sys.stderr, flush=True)
    print(f"run_benchmark.py --kernel tiled -n {args.n} (ROW_CHUNK=1), whole process, {args.pairs} pairs; base "
          f"{sides['base'].name[:12]}; load average {load0:.1f} -> {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs, "
          f"{time.perf_counter() - t0:.0f} s wall")
    for e in editions:
        this, old = cpu[("this", e)], cpu[("base", e)]
        ratios = sorted(a / b for a, b in zip(this, old))
        print(f"  {e:6s}: this {statistics.median(this):.2f} CPU s, base {statistics.median(old):.2f} CPU s; "
              f"this/base median {statistics.median(ratios):.3f} (range {ratios[0]:.3f}-{ratios[-1]:.3f})")
        if lat[("this", e)] != lat[("base", e)]:
            print(f"  {e:6s}: MODELLED LATENCY DIFFERS: this {sorted(lat[('this', e)])}, base "
                  f"{sorted(lat[('base', e)])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
