"""Command line: ``python -m grader {grade,batch,calibrate,annotate,gradescope,rubric}`` (also ``grader ...``).

Exit status: 0 when grading worked (whatever the score), 2 for usage errors, 3 when the grader itself failed
(the reports then say "autograder error", which is never the student's fault).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import threading
import time
from pathlib import Path

EXIT_OK, EXIT_USAGE, EXIT_GRADER_ERROR = 0, 2, 3


def _split_only(values: list[str] | None) -> tuple[str, ...]:
    out: list[str] = []
    for v in values or []:
        out += [x.strip() for x in v.split(",") if x.strip()]
    return tuple(out)


def _config(args: argparse.Namespace):
    from grader.records import GradeConfig

    return GradeConfig(
        rubric_path=args.rubric,
        only=_split_only(args.only),
        backend=args.backend,
        target=args.target,
        seed=args.seed,
        screen=not getattr(args, "no_screen", False),
        workers=getattr(args, "workers", 1),
        timeout_scale=args.timeout_scale,
    )


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--backend",
        choices=("auto", "nkisim", "neuron"),
        default="auto",
        help="where kernels run: nkisim (emulator + performance model) or neuron (real Trainium)",
    )
    p.add_argument("--target", choices=("trn2", "trn1"), default="trn2", help="NeuronCore generation (default trn2)")
    p.add_argument("--seed", type=int, default=None, help="input seed (default: the rubric's)")
    p.add_argument(
        "--only",
        action="append",
        metavar="GLOB",
        help="grade only tests whose id matches (e.g. 'part1.*'); repeatable or comma-separated",
    )
    p.add_argument("--rubric", default=None, help="rubric TOML file (default: grader/rubric.toml)")
    p.add_argument("--timeout-scale", type=positive_float, default=1.0,
                   help="multiply every per-test time limit (a positive number)")


def selection_problem(args: argparse.Namespace) -> str | None:
    """A mistyped --rubric path or an --only matching no test is a usage error (exit 2), found before grading.
    A rubric file that exists but does not parse stays the grader's failure (exit 3, reported in the results)."""
    from grader.rubric import RubricError, load_rubric

    if args.rubric and not Path(args.rubric).is_file():
        return f"--rubric {args.rubric}: no such file"
    only = _split_only(args.only)
    if not only:
        return None
    try:
        load_rubric(args.rubric).select(list(only))
    except RubricError as exc:
        return str(exc) if "matches no test" in str(exc) else None
    return None


def unwritable_dir(path: Path) -> str | None:
    """Why reports cannot be written under ``path`` (None when they can): checked before grading, so a typo in
    --out does not cost a whole grading run.  Creates the directory, as writing the reports would."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        return "exists and is not a directory"
    except OSError as exc:
        return f"cannot create the directory ({exc.strerror or exc})"
    if not os.access(path, os.W_OK | os.X_OK):
        return "the directory is not writable"
    return None


def positive_float(text: str) -> float:
    """argparse type for a scale factor: a finite number above zero (a zero or negative time limit would turn
    every test into a timeout)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def cmd_grade(args: argparse.Namespace) -> int:
    from grader import reports
    from grader.pipeline import grade_submission
    from grader.submission import SubmissionError

    if problem := selection_problem(args):
        print(f"grader: {problem}", file=sys.stderr)
        return EXIT_USAGE
    out = Path(args.out) if args.out else None
    if out is not None and (problem := unwritable_dir(out)):
        print(f"grader: --out {out}: {problem}", file=sys.stderr)
        return EXIT_USAGE
    try:
        record = grade_submission(args.submission, out, _config(args), student=args.student)
    except SubmissionError as exc:
        print(f"grader: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        print(json.dumps(record.to_dict(), indent=1, default=str))
    elif not args.quiet:
        print(reports.text_table(record))
        if out:
            print(f"\nreports written to {out}/ (results.json, junit.xml, summary.md, result.json)")
    if args.github:
        _github_outputs(record)
    return EXIT_GRADER_ERROR if record.status == "error" else EXIT_OK


def _github_outputs(record) -> None:
    from grader import reports

    for line in reports.github_annotations(record):
        print(line)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as fh:
            fh.write(reports.summary_markdown(record) + "\n")
    out = os.environ.get("GITHUB_OUTPUT")
    if out:
        with open(out, "a", encoding="utf-8") as fh:
            fh.write(f"score={record.score:g}\nmax_score={record.base_points:g}\nstatus={record.status}\n")


def cmd_annotate(args: argparse.Namespace) -> int:
    """Re-emit GitHub annotations and the job summary from an existing result directory."""
    from grader.records import GradeRecord, TestResult

    data = json.loads((Path(args.result_dir) / "result.json").read_text())
    tests = [TestResult(**{k: v for k, v in t.items() if k != "cases"}) for t in data.pop("tests")]
    record = GradeRecord(tests=tests, **data)
    _github_outputs(record)
    return EXIT_OK


def _executor_options(args: argparse.Namespace) -> dict:
    """--address / --retries for the executor (ray: grader/ray_executor.py); refuse ones it does not take."""
    if args.address and args.executor != "ray":
        raise ValueError("--address only applies to --executor ray")
    if args.retries is not None and args.executor == "serial":
        raise ValueError("--retries applies to --executor local or ray")
    if args.ship_files and args.executor != "ray":
        raise ValueError("--ship-files only applies to --executor ray")
    options = {"address": args.address} if args.address else {}
    options |= {"ship_files": True} if args.ship_files else {}
    return options | ({"retries": args.retries} if args.retries is not None else {})


def cmd_batch(args: argparse.Namespace) -> int:
    from grader.batch import run_batch, summarize
    from grader.submission import SubmissionError

    if problem := selection_problem(args):
        print(f"grader: {problem}", file=sys.stderr)
        return EXIT_USAGE
    if problem := unwritable_dir(Path(args.out)):
        print(f"grader: --out {args.out}: {problem}", file=sys.stderr)
        return EXIT_USAGE
    t0 = time.perf_counter()
    try:
        results = run_batch(
            args.source,
            args.out,
            _config(args),
            jobs=args.jobs,
            executor=args.executor,
            force=args.force,
            progress=not args.quiet,
            executor_options=_executor_options(args),
        )
    except (SubmissionError, ValueError) as exc:
        print(f"grader: {exc}", file=sys.stderr)
        return EXIT_USAGE
    wall = time.perf_counter() - t0
    counts = summarize(results)
    graded = counts.get("graded", 0)
    print(
        f"{len(results)} submissions: "
        + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        + f"; {wall:.1f} s wall"
        + (f", {graded / wall * 3600:.0f} graded/hour" if graded else "")
    )
    print(f"gradebook: {Path(args.out) / 'gradebook.csv'}; overview: {Path(args.out) / 'overview.md'}")
    return EXIT_GRADER_ERROR if counts.get("error") else EXIT_OK


def cmd_calibrate(args: argparse.Namespace) -> int:
    from grader import thresholds
    from grader.calibrate import calibrate

    targets = ("trn2", "trn1") if args.target == "all" else (args.target,)
    cache = thresholds.user_cache_file() if args.user_cache else thresholds.PACKAGE_CACHE
    for target in targets:
        if args.if_missing and thresholds.cached_timings(args.backend, target) is not None:
            print(f"reference timings for {thresholds.cache_key(args.backend, target)} already cached")
            continue
        print(f"calibrating {args.backend}/{target} ({thresholds.tool_version()}) -> {cache}")
        t0 = time.perf_counter()
        calibrate(backend=args.backend, target=target, cache_file=cache, verbose=True)
        print(f"  done in {time.perf_counter() - t0:.1f} s")
    return EXIT_OK


def cmd_gradescope(args: argparse.Namespace) -> int:
    from grader.gradescope_build import build_autograder_zip

    path = build_autograder_zip(Path(args.out), Path(args.root))
    print(f"wrote {path}")
    return EXIT_OK


def cmd_rubric(args: argparse.Namespace) -> int:
    from tabulate import tabulate

    from grader.rubric import load_rubric

    r = load_rubric(args.rubric)
    rows = [
        [
            t.id,
            t.kind,
            f"{t.points:g}" + (" EC" if t.extra_credit else ""),
            len(t.cases),
            t.visibility,
            ", ".join(t.requires),
        ]
        for t in r.tests
    ]
    print(tabulate(rows, headers=["test", "kind", "points", "cases", "visibility", "requires"]))
    print(f"\nbase {r.base_points:g} + extra credit {r.total_points - r.base_points:g} = {r.total_points:g}")
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="grader", description="Sandboxed autograder for the NKI assignment.")
    sub = parser.add_subparsers(dest="command", required=True)

    g = sub.add_parser("grade", help="grade one submission (directory or asst4.tar.gz)")
    g.add_argument("submission")
    g.add_argument("--out", default=None, help="directory for results.json, junit.xml, summary.md, result.json")
    g.add_argument("--student", default=None, help="student id recorded in the reports")
    g.add_argument(
        "--workers",
        type=int,
        default=min(2, os.cpu_count() or 1),
        help="kernel runs of this submission in parallel (default: up to 2)",
    )
    g.add_argument("--json", action="store_true", help="print result.json instead of the table")
    g.add_argument(
        "--github", action="store_true", help="print GitHub annotations and append the summary to $GITHUB_STEP_SUMMARY"
    )
    g.add_argument("--quiet", action="store_true")
    g.add_argument("--no-screen", action="store_true", help=argparse.SUPPRESS)  # grader tests only
    _common(g)
    g.set_defaults(func=cmd_grade)

    b = sub.add_parser("batch", help="grade a directory of submissions or a manifest (CSV/JSON)")
    b.add_argument("source")
    b.add_argument("--out", required=True)
    b.add_argument("--jobs", type=int, default=2, help="submissions graded in parallel")
    b.add_argument("--executor", default="local", help="local (process pool), serial, or ray")
    b.add_argument(
        "--address",
        default=None,
        help="ray: address of a running cluster (default: $RAY_ADDRESS, else a local one for this run)",
    )
    b.add_argument(
        "--retries",
        type=int,
        default=None,
        help="times a job is retried after an infrastructure failure (local default 1, ray 2)",
    )
    b.add_argument(
        "--ship-files",
        action="store_true",
        help="ray: send submissions to the workers and write results here (nodes without a shared file system)",
    )
    b.add_argument("--force", action="store_true", help="regrade even when an identical result exists")
    b.add_argument("--quiet", action="store_true")
    _common(b)
    b.set_defaults(func=cmd_batch)

    c = sub.add_parser("calibrate", help="recompute the reference timings behind the latency targets")
    c.add_argument("--target", choices=("trn2", "trn1", "all"), default="all")
    c.add_argument("--backend", choices=("nkisim",), default="nkisim")
    c.add_argument(
        "--user-cache", action="store_true", help="write the per-user cache instead of grader/reference_timings.json"
    )
    c.add_argument("--if-missing", action="store_true", help="only when no cached timings exist for this version")
    c.set_defaults(func=cmd_calibrate)

    a = sub.add_parser("annotate", help="GitHub annotations + job summary from a result directory")
    a.add_argument("result_dir")
    a.set_defaults(func=cmd_annotate)

    z = sub.add_parser("gradescope", help="build autograder.zip for Gradescope")
    z.add_argument("--out", default="autograder.zip")
    z.add_argument("--root", default=str(Path(__file__).resolve().parent.parent), help="project root")
    z.set_defaults(func=cmd_gradescope)

    r = sub.add_parser("rubric", help="print the rubric")
    r.add_argument("--rubric", default=None)
    r.set_defaults(func=cmd_rubric)
    return parser


def _terminated(signum, frame) -> None:
    raise KeyboardInterrupt  # unwind like Ctrl-C: run directories are removed, no partial reports are written


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminated) if in_main_thread else None
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        print("grader: interrupted", file=sys.stderr)
        return 130
    finally:
        if in_main_thread:
            signal.signal(signal.SIGTERM, previous)
