"""Run AWS's nki-library fast tests on nkisim: a conformance suite for maintainers (not CI: it needs the library's
checkout and torch, neither of which the course depends on).

    python tools/nkilib_conformance.py --nkilib /path/to/nki-library [-k EXPR] [--env DIR] [--json OUT]

What it does, in order:

1. Makes (once) a separate virtual environment (``--env``, default ``~/.cache/nkisim/nkilib-conformance``) with
   torch 2.13.0 (the CPU build), what nki-library's tests import (its ``[test]`` extra without the linters, plus
   ml_dtypes) and nkisim's own runtime dependencies.  nkisim itself is not installed there: it is put on
   ``PYTHONPATH`` from this checkout, so the run always measures the working tree.
2. Runs, in the library's checkout, its own pytest harness on every ``@pytest.mark.fast`` case of
   ``test/integration`` for trn2 (``--test-mode simulation``: the harness's CPU-simulation mode, which skips
   compilation and validates the outputs against the test's torch golden with the test's atol/rtol).  The
   plugin ``tools/nkilib_support/nkisim_nkilib_plugin.py`` substitutes nkisim for AWS's simulator in that mode's
   two device-facing functions and changes nothing else; ``neuron_dtypes`` (an AWS toolchain package the tests
   import, not on PyPI) is the small stand-in beside it.
3. Prints one line per case (outcome, seconds, test id, the failure's last line), the out-of-scope cases with
   their reason (trn3-only, trace-only, multi-rank, test modules the library itself cannot import at that commit,
   and the harness's own large-shape simulation skips, which ``--all-sizes`` runs too), and the total.  By default
   each fast test function runs its smallest case (the product of its integer parameters); ``--all-cases`` runs
   every fast case.  Nothing of the library is copied into this repository.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SUPPORT = Path(__file__).resolve().parent / "nkilib_support"
DEFAULT_ENV = Path.home() / ".cache" / "nkisim" / "nkilib-conformance"
# torch==2.13.0 is the CPU build this workplace keeps on local disk (pip takes it without a download); the rest is
# nki-library's pyproject [test] extra less the linters/debuggers, plus ml_dtypes (its tests import it) and
# pytest-timeout (--timeout); then nkisim's runtime dependencies.
TORCH = "torch==2.13.0"
TEST_DEPS = ["numpy", "ml_dtypes", "scipy", "pandas", "aws-embedded-metrics", "boto3", "fabric2", "filelock",
             "plotext", "pytest", "pytest-xdist", "pytest-metadata", "pytest-html", "pytest-timeout", "allpairspy"]
NKISIM_DEPS = ["tabulate", "threadpoolctl"]
READY = ".nkisim-nkilib-ready"


def make_env(env: Path) -> Path:
    """The environment's python, creating and filling the environment on first use."""
    python = env / "bin" / "python"
    if (env / READY).exists():
        return python
    print(f"creating the conformance environment in {env} (torch and the library's test dependencies)",
          flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(env)], check=True)
    pip = [str(python), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, TORCH], check=True)
    subprocess.run([*pip, *TEST_DEPS, *NKISIM_DEPS], check=True)
    (env / READY).write_text("ok\n", encoding="utf-8")
    return python


def commit_of(checkout: Path) -> str:
    try:
        out = subprocess.run(["git", "-C", str(checkout), "log", "-1", "--format=%h %s"], capture_output=True,
                             text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git work tree)"
    return out


def run(args: argparse.Namespace) -> int:
    checkout = Path(args.nkilib).resolve()
    if not (checkout / "test" / "utils" / "simulation_setup.py").is_file():
        print(f"error: {checkout} is not an nki-library checkout (no test/utils/simulation_setup.py)",
              file=sys.stderr)
        return 2
    python = make_env(Path(args.env).expanduser())
    with tempfile.TemporaryDirectory(prefix="nkilib-conformance-") as tmp:
        results = Path(tmp) / "results.jsonl"
        cmd = [str(python), "-m", "pytest", "test/integration", "-m", "fast", "--test-mode", "simulation",
               "--platform-target", "trn2", "--output-directory", str(Path(tmp) / "out"),
               "-p", "nkisim_nkilib_plugin", "-p", "no:cacheprovider", "-q", "--no-header", "-rN",
               "--continue-on-collection-errors", "--disable-no-tests-failure"]
        if args.k:
            cmd += ["-k", args.k]
        if args.timeout:
            cmd += ["--timeout", str(args.timeout)]
        env = dict(os.environ)
        # the library's sources as its editable install would put them (src/), the stand-ins, this nkisim
        env["PYTHONPATH"] = os.pathsep.join([str(SUPPORT), str(REPO), str(checkout / "src")])
        env["NKILIB_CONFORMANCE_OUT"] = str(results)
        env["NKILIB_CONFORMANCE_CASES"] = "all" if args.all_cases else "smallest"
        env["NKISIM_DISABLE_FALLBACK"] = ""
        env.setdefault("OMP_NUM_THREADS", "1")
        if args.all_sizes:
            env["NKILIB_SIMULATION_RUN_ALL"] = "1"
        print(f"nki-library {commit_of(checkout)} at {checkout}", flush=True)
        print("$ " + " ".join(cmd), flush=True)
        start = time.perf_counter()
        limit = int((args.memory_gib if args.memory_gib else 0.6 * _mem_total()) * 2**30)
        print(f"(address space limited to {limit / 2**30:.1f} GiB)", flush=True)
        proc = subprocess.run(cmd, cwd=checkout, env=env, capture_output=not args.verbose, text=True,
                              preexec_fn=(lambda: _limit_memory(limit)) if limit > 0 else None)
        wall = time.perf_counter() - start
        records = [json.loads(line) for line in results.read_text(encoding="utf-8").splitlines()] \
            if results.exists() else []
    if not records:
        print((proc.stdout or "")[-5000:] + (proc.stderr or "")[-5000:])
        print("error: no case ran (see the pytest output above)", file=sys.stderr)
        return 2
    status = report(records, wall, args.json)
    if proc.returncode < 0:
        # killed (the kernel's OOM killer, a signal): the cases after the one running then have no record, so the
        # figure above is not the library's (a run killed by the OOM killer in the cross-entropy forward at Qwen3-8B
        # size once reported 42 of 42, silently without the cases after it)
        print(f"error: pytest died by signal {-proc.returncode} after {len(records)} records; the run is incomplete "
              "(a case ran out of memory? lower --memory-gib so that it fails alone)", file=sys.stderr)
        return 2
    return status


def _mem_total() -> float:
    """The machine's memory in GiB (0 when unknown: no limit)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("MemTotal:")) / 2**20
    except (OSError, StopIteration, ValueError):
        return 0.0


def _limit_memory(limit: int) -> None:
    """In the pytest child: cap its address space, so that a case too large for this machine (nki-library's
    cross-entropy at Qwen3-8B size: 4.25 GB of bf16 logits, its torch reference upcast to fp32) raises MemoryError
    in its own process rather than the OOM killer ending other processes.  The plugin reports it out of scope when
    the test's own code ran out (inputs, golden), a failure when it was raised inside nkisim (the kernel's run)."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def report(records: list[dict], wall: float, json_out: str | None) -> int:
    seen: dict[str, dict] = {}
    for r in records:  # a case recorded twice (setup then call) keeps its last word
        seen[r["nodeid"]] = r
    cases = list(seen.values())
    in_scope = [r for r in cases if r["outcome"] in ("passed", "failed")]
    broken = [r for r in cases if r["outcome"] == "import-error"]
    out_scope = [r for r in cases if r["outcome"] not in ("passed", "failed", "import-error")]
    for r in in_scope:
        mark = "PASS" if r["outcome"] == "passed" else "FAIL"
        tail = f"  {r['reason']}" if r["reason"] else ""
        print(f"{mark} {r['seconds']:8.2f}s  {r['nodeid']}{tail}")
    for r in broken:
        print(f"IMPORT ERROR {r['nodeid']}: {r['reason']} (its cases are not counted)")
    if out_scope:
        groups: dict[tuple[str, str], int] = {}
        for r in out_scope:
            key = (r["nodeid"].split("[", 1)[0], r["reason"])
            groups[key] = groups.get(key, 0) + 1
        print(f"\nout of scope ({len(out_scope)} cases):")
        for (test, reason), n in sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            print(f"  {test} ({n} case{'s' if n > 1 else ''}): {reason}")
    passed = sum(r["outcome"] == "passed" for r in in_scope)
    seconds = [r["seconds"] for r in in_scope]
    pct = 100.0 * passed / len(in_scope) if in_scope else 0.0
    mean = sum(seconds) / len(seconds) if seconds else 0.0
    median = sorted(seconds)[len(seconds) // 2] if seconds else 0.0
    print(f"\n{passed} passed, {len(in_scope) - passed} failed of {len(in_scope)} in-scope fast cases ({pct:.1f}%); "
          f"{len(broken)} test modules that do not import; {len(out_scope)} out of scope")
    print(f"{wall:.0f} s wall; per case: mean {mean:.2f} s, median {median:.2f}, max {max(seconds, default=0):.2f} s")
    if json_out:
        tmp = Path(json_out).with_suffix(".tmp")
        tmp.write_text(json.dumps({"cases": cases, "passed": passed, "in_scope": len(in_scope), "wall_s": wall},
                                  indent=1), encoding="utf-8")
        tmp.replace(json_out)
    return 0 if passed == len(in_scope) and not broken else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nkilib", required=True, help="a checkout (work tree) of aws-neuron/nki-library")
    parser.add_argument("--env", default=str(DEFAULT_ENV), help=f"the separate environment (default {DEFAULT_ENV})")
    parser.add_argument("-k", help="pytest -k expression selecting cases")
    parser.add_argument("--all-cases", action="store_true",
                        help="every fast case (default: the smallest case of each fast test function)")
    parser.add_argument("--all-sizes", action="store_true", help="also run the large shapes the harness skips")
    parser.add_argument("--timeout", type=int, default=0, help="seconds per case (pytest-timeout); 0: none")
    parser.add_argument("--json", help="also write every case's record to this file")
    parser.add_argument("--memory-gib", type=float, default=None,
                        help="address-space limit of the pytest process in GiB (default: 60%% of the machine's "
                             "memory): a case beyond it fails with MemoryError in its own process instead of the "
                             "kernel's OOM killer ending other processes; out of scope when the test's own code "
                             "(inputs, golden) ran out, a failure when nkisim did")
    parser.add_argument("-v", "--verbose", action="store_true", help="show pytest's own output")
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
