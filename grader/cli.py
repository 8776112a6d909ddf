"""Command line: ``python -m grader {grade,batch,leaderboard,calibrate,annotate,gradescope,rubric}`` (also
``grader ...``).

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
from typing import NoReturn

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
    p.add_argument("--seed", type=int, default=None,
                   help="input seed (grade: default derived from the submission; batch: the class's secret seed)")
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


def _ranked_config(args: argparse.Namespace, config):
    """grade --seed-file: a ranked grading with the class's secret seed (e.g. on Gradescope)."""
    from dataclasses import replace

    from grader import seeds

    if not args.seed_file:
        if args.ref_cache:
            raise seeds.SeedError("--ref-cache needs --seed-file (the cache is keyed by the class's secret seed)")
        return config
    if args.seed is not None:
        raise seeds.SeedError("give either --seed or --seed-file, not both")
    hidden = [str(Path(args.seed_file).resolve().parent)]
    if args.ref_cache:
        seeds.ensure_private_dir(Path(args.ref_cache))
        hidden.append(str(Path(args.ref_cache).resolve()))
    return replace(config, seed=seeds.read_seed(args.seed_file), seed_mode="secret", ref_cache=args.ref_cache,
                   hidden_dirs=tuple(hidden))


def _early_servers(args: argparse.Namespace, config) -> None:
    """Start the grading's warm kernel servers now, before this process imports NumPy and the grader's modules
    (grader/warmstart.py): one per API of the submission's files, with the rubric's limits.  Anything unusual (an
    unreadable submission or rubric, real Trainium, servers turned off) starts none here: the grading then starts
    its own, and reports any problem, as before."""
    if args.backend == "neuron" or os.environ.get("GRADER_WARM_SERVERS", "1") == "0":
        return
    from grader import apis, warmstart
    from grader.rubric import load_limits
    from grader.submission import load_submission

    try:
        if args.backend == "auto" and any(apis.toolchain(api).kind == "neuron" for api in ("nki", "legacy")):
            return  # a Trainium machine: every call a fresh process there (grader/pipeline.py resolve_backend)
        limits = load_limits(config.rubric_path)
        found = apis.detect_files(load_submission(args.submission, args.student).files)
    except Exception:  # noqa: BLE001 - whatever it is, the grading meets it again and reports it as before
        return
    wanted = sorted({f.api for f in found.values() if f.api is not None and f.error is None})
    warmstart.early(wanted, target=config.target, limits=limits, tmp_root=config.tmp_root)


def cmd_grade(args: argparse.Namespace) -> int:
    from grader import warmstart
    from grader.seeds import SeedError

    if problem := selection_problem(args):
        print(f"grader: {problem}", file=sys.stderr)
        return EXIT_USAGE
    out = Path(args.out) if args.out else None
    if out is not None and (problem := unwritable_dir(out)):
        print(f"grader: --out {out}: {problem}", file=sys.stderr)
        return EXIT_USAGE
    try:
        config = _ranked_config(args, _config(args))
    except SeedError as exc:
        print(f"grader: {exc}", file=sys.stderr)
        return EXIT_USAGE
    _early_servers(args, config)  # before the imports below (round 12: docs/grading.md, "prestart")
    from grader import reports
    from grader.pipeline import grade_submission, retain_until_exit
    from grader.submission import SubmissionError

    if getattr(args, "whole_process", False):
        retain_until_exit()  # freed by the process's end (_end)
    try:
        record = grade_submission(args.submission, out, config, student=args.student)
    except SubmissionError as exc:
        print(f"grader: {exc}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        warmstart.discard()  # what the grading did not take (it closes those it took)
    if args.json:
        print(json.dumps(record.to_dict(), indent=1, default=str))
    elif not args.quiet:
        print(reports.text_table(record))
        if out:
            print(f"\nreports written to {out}/ (results.json, junit.xml, summary.md, result.json)")
    if args.github:
        _github_outputs(record)
    if getattr(args, "whole_process", False):
        global _GRADED
        _GRADED = True
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
    from grader.batch import class_config
    from grader.seeds import SeedError

    config = _config(args)
    if args.seed_mode == "secret":
        try:
            config, note = class_config(config, args.out, seed_file=args.seed_file, rotate=args.rotate_seed)
        except SeedError as exc:
            print(f"grader: {exc}", file=sys.stderr)
            return EXIT_USAGE
        if not args.quiet:
            print(f"grader: inputs from the {note}", file=sys.stderr)
    elif args.seed_file or args.rotate_seed:
        print("grader: --seed-file and --rotate-seed apply to --seed-mode secret", file=sys.stderr)
        return EXIT_USAGE
    t0 = time.perf_counter()
    try:
        results = run_batch(
            args.source,
            args.out,
            config,
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
    if config.seed_mode == "secret" and graded + counts.get("skipped", 0):
        print(f"leaderboard: python -m grader leaderboard {args.out}")
    return EXIT_GRADER_ERROR if counts.get("error") else EXIT_OK


def cmd_leaderboard(args: argparse.Namespace) -> int:
    from grader.leaderboard import LeaderboardError, write_leaderboard
    from grader.rubric import RubricError
    from grader.seeds import SeedError

    try:
        path, rows, left_out = write_leaderboard(
            args.out_dir, dest=args.out, names=args.names, rubric_path=args.rubric, seed_file=args.seed_file
        )
    except (LeaderboardError, SeedError, RubricError) as exc:
        print(f"grader: {exc}", file=sys.stderr)
        return EXIT_USAGE
    ranked = sum(1 for r in rows if r.rank is not None)
    print(f"wrote {path}: {ranked} ranked of {len(rows)} submissions"
          + "".join(f"; left out {n}: {why}" for why, n in sorted(left_out.items())))
    return EXIT_OK


def cmd_calibrate(args: argparse.Namespace) -> int:
    from grader import thresholds
    from grader.calibrate import calibrate
    from grader.staff import APIS, reference_available

    targets = ("trn2", "trn1") if args.target == "all" else (args.target,)
    apis = APIS if args.api == "all" else (args.api,)
    missing = [api for api in apis if not reference_available(api)]
    if missing and args.api != "all":
        print(f"grader: no staff reference in the {args.api} API here (grader/staff.py)", file=sys.stderr)
        return EXIT_USAGE
    for api in missing:  # loud: an API left out keeps borrowing the other's timings (grader/thresholds.py)
        print(f"skipping the {api} API: its staff reference is not in this tree (grader/staff.py)", file=sys.stderr)
    cache = thresholds.user_cache_file() if args.user_cache else thresholds.PACKAGE_CACHE
    for api in (a for a in apis if a not in missing):
        for target in targets:
            key = thresholds.cache_key(args.backend, target, api)
            if args.if_missing and thresholds.cached_timings(args.backend, target, api) is not None:
                print(f"reference timings for {key} already cached")
                continue
            print(f"calibrating {key} -> {cache}")
            t0 = time.perf_counter()
            calibrate(backend=args.backend, target=target, api=api, cache_file=cache, verbose=True)
            print(f"  done in {time.perf_counter() - t0:.1f} s")
    return EXIT_OK


def cmd_gradescope(args: argparse.Namespace) -> int:
    from grader.gradescope_build import build_autograder_zip
    from grader.seeds import SeedError

    try:
        path = build_autograder_zip(Path(args.out), Path(args.root), Path(args.seed_file) if args.seed_file else None)
    except SeedError as exc:
        print(f"grader: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(f"wrote {path}")
    return EXIT_OK


def cmd_rubric(args: argparse.Namespace) -> int:
    from tabulate import tabulate

    from grader.rubric import load_rubric

    r = load_rubric(args.rubric)
    if args.markdown:
        from grader.reports import rubric_markdown

        print(rubric_markdown(r))
        return EXIT_OK
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
    g.add_argument("--seed-file", default=None,
                   help="a ranked grading: inputs from the class's secret seed in this file (grader/seeds.py)")
    g.add_argument("--ref-cache", default=None, metavar="DIR",
                   help="with --seed-file: reuse and keep references in this private directory")
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
    b.add_argument(
        "--seed-mode",
        choices=("secret", "submission"),
        default="secret",
        help="secret (default): one secret class seed for every submission (shared references, ranked runs); "
        "submission: a seed per submission, as a student's own runs",
    )
    b.add_argument("--seed-file", default=None,
                   help="the class's secret seed (default OUT/.grader/secret-seed, created on first use)")
    b.add_argument("--rotate-seed", action="store_true",
                   help="replace the secret seed with a new random one (everything is then regraded)")
    _common(b)
    b.set_defaults(func=cmd_batch)

    lb = sub.add_parser("leaderboard", help="rank a graded batch: one self-contained, sortable HTML page")
    lb.add_argument("out_dir", help="the --out directory of python -m grader batch")
    lb.add_argument("--out", default=None, help="where to write the page (default OUT_DIR/leaderboard.html)")
    lb.add_argument("--names", action="store_true", help="show student ids instead of pseudonyms")
    lb.add_argument("--rubric", default=None, help="rubric TOML file (default: grader/rubric.toml)")
    lb.add_argument("--seed-file", default=None,
                    help="rank the runs of this class seed (default: the one the batch was last graded with)")
    lb.set_defaults(func=cmd_leaderboard)

    c = sub.add_parser("calibrate", help="recompute the reference timings behind the latency targets")
    c.add_argument("--target", choices=("trn2", "trn1", "all"), default="all")
    c.add_argument("--backend", choices=("nkisim",), default="nkisim")
    c.add_argument("--api", choices=("nki", "legacy", "all"), default="all",
                   help="whose staff kernels: the current API's (nki), the legacy one's, or both (default)")
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
    z.add_argument("--seed-file", default=None,
                   help="ship this class seed: ranked runs on secret inputs, with Gradescope leaderboard items")
    z.set_defaults(func=cmd_gradescope)

    r = sub.add_parser("rubric", help="print the rubric")
    r.add_argument("--rubric", default=None)
    r.add_argument("--markdown", action="store_true",
                   help="what each test checks, with its tolerance and reference precision (docs/grading.md)")
    r.set_defaults(func=cmd_rubric)
    return parser


# Set by a `grade` run through :func:`run` once its reports are written: the process may end without freeing.
_GRADED = False


def _quiescent() -> bool:
    """Whether nothing of this process is still at work: no thread but the caller, daemon threads and the warm
    servers' spawner (grader/sandbox.py ``_spawner``: one idle thread that lives as long as the process by design;
    the servers it started are reaped by the grading's close), and no child process, running or unreaped."""
    me = threading.current_thread()
    if any(t is not me and not t.daemon and not t.name.startswith("grader-server-spawner")
           for t in threading.enumerate()):
        return False
    benign = _resource_tracker_pid()
    try:
        for task in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{task}/children", encoding="ascii") as fh:
                if any(int(pid) != benign for pid in fh.read().split()):
                    return False
    except (OSError, ValueError):
        return False
    return True


def _resource_tracker_pid() -> int | None:
    """The pid of multiprocessing's resource tracker if this process started one: a helper that lives as long as
    its parent by design and, when the parent is gone (its pipe closes), releases what was registered with it and
    ends -- so it is no reason to keep the ordinary exit (a pytest process that ran a batch has one)."""
    tracker_module = sys.modules.get("multiprocessing.resource_tracker")
    tracker = getattr(tracker_module, "_resource_tracker", None)
    pid = getattr(tracker, "_pid", None)
    return pid if isinstance(pid, int) else None


def _end(code: int) -> NoReturn:
    """End the process with ``code``.  After a `grade` (:data:`_GRADED`: its record and reports written, each by
    tmp + rename, its pools joined and its kernel servers reaped by the grading's close) and with nothing of the
    process still at work (:func:`_quiescent`), by ``os._exit`` once stdout and stderr are flushed: the interpreter's
    teardown -- every module's objects freed one at a time, the executors' exit hooks -- took 0.1-0.25 s of an idle
    machine (1.2 s loaded) between the reports and the process's end (round 12, tail), and an exiting process hands
    its memory back whole.  Otherwise (another command, or something still running) the ordinary exit."""
    if _GRADED:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except (OSError, ValueError):  # a closed or broken pipe: the ordinary exit reports it as it always did
            sys.exit(code)
        if _quiescent():
            os._exit(code)
    sys.exit(code)


def run() -> NoReturn:
    """The process's entry point (``python -m grader``, the ``grader`` script): :func:`main`, then :func:`_end`.
    A `grade` run this way keeps its grading's objects until the process ends (grader.pipeline.retain_until_exit):
    nothing else runs in this process after it."""
    _end(main(whole_process=True))


def _terminated(signum, frame) -> None:
    raise KeyboardInterrupt  # unwind like Ctrl-C: run directories are removed, no partial reports are written


def main(argv: list[str] | None = None, *, whole_process: bool = False) -> int:
    """Run the command ``argv`` names; its exit status.  ``whole_process``: the command is all this process does
    (:func:`run`)."""
    args = build_parser().parse_args(argv)
    args.whole_process = whole_process
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
