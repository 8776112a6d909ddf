"""Load and validate the rubric (grader/rubric.toml): the grader's only source of tests, shapes and points.

Keeping the rubric as data lets TAs change points or shapes without touching code, and lets the grader record
a hash of exactly what it graded against (result.json, batch resume keys).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:  # Python >= 3.11
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]


DEFAULT_RUBRIC = Path(__file__).with_name("rubric.toml")

KINDS = ("correctness", "performance")
VISIBILITIES = ("visible", "hidden", "after_due_date", "after_published")
SUBMISSION_FILES = ("part1/kernels.py", "part2/conv2d.py")


class RubricError(ValueError):
    """The rubric file is malformed; the message names the offending test and field."""


@dataclass(frozen=True)
class Limits:
    address_space_mib: int = 6144
    file_size_mib: int = 1024
    processes: int = 64
    open_files: int = 256
    cpu_seconds_slack: int = 10
    # Each student file is imported once, in the sandbox, before any test: this many seconds of import time
    # (interpreter start-up excluded).  A file that fails or hangs fails every test that needs it at once.
    import_timeout_s: float = 20.0


@dataclass(frozen=True)
class TestSpec:
    id: str
    name: str
    part: int
    file: str
    function: str
    kind: str
    problem: str
    points: float
    cases: tuple[dict[str, Any], ...]
    timeout_s: float = 120.0
    extra_credit: bool = False
    visibility: str = "visible"
    requires: tuple[str, ...] = ()
    thresholds: dict[str, Any] = field(default_factory=dict)
    # NKI calls the handout forbids in this part (dotted names under nki., e.g. "nki.language.transpose"):
    # named in the test's message, not scored (grader/policy.py)
    disallowed_apis: tuple[str, ...] = ()

    @property
    def tags(self) -> list[str]:
        tags = [f"part{self.part}", self.kind]
        if self.extra_credit:
            tags.append("extra-credit")
        return tags


LEADERBOARD_METRICS = {"score": "asc", "latency_us": "asc", "mfu": "desc"}  # metric -> Gradescope's default order


@dataclass(frozen=True)
class LeaderboardEntry:
    """One column of Gradescope's leaderboard: ``metric`` of ``test`` (``score``: the ranking score itself)."""

    name: str
    metric: str
    test: str = ""
    order: str = "asc"


@dataclass(frozen=True)
class LeaderboardSpec:
    """What ranks a class (grader/ranking.py): the score is the geometric mean of ``score_tests``' p99
    latencies among submissions passing all of them; ``entries`` are the results.json leaderboard items;
    ``ranked_only``: only runs graded with the class's secret seed carry them."""

    score_tests: tuple[str, ...] = ()
    entries: tuple[LeaderboardEntry, ...] = ()
    ranked_only: bool = True


@dataclass(frozen=True)
class Rubric:
    title: str
    version: int
    seed: int
    partial_credit: float
    threshold_factor: float
    borderline_margin: float
    verify_performance_outputs: bool
    limits: Limits
    tolerances: dict[str, tuple[float, float]]
    tests: tuple[TestSpec, ...]
    sha256: str
    path: str
    leaderboard: LeaderboardSpec = LeaderboardSpec()

    @property
    def total_points(self) -> float:
        """Sum of every test's points, extra credit included (= sum of max_score in results.json)."""
        return round(sum(t.points for t in self.tests), 6)

    @property
    def base_points(self) -> float:
        """Points without extra credit (what a complete, fast submission earns)."""
        return round(sum(t.points for t in self.tests if not t.extra_credit), 6)

    def test(self, test_id: str) -> TestSpec:
        for t in self.tests:
            if t.id == test_id:
                return t
        raise KeyError(f"no test {test_id!r} in rubric {self.path}")

    def select(self, patterns: list[str] | None) -> Rubric:
        """A rubric restricted to tests whose id matches one of the glob patterns (``--only``)."""
        if not patterns:
            return self
        import fnmatch

        chosen = tuple(t for t in self.tests if any(fnmatch.fnmatchcase(t.id, p) for p in patterns))
        if not chosen:
            raise RubricError(f"--only {patterns} matches no test; tests are: {[t.id for t in self.tests]}")
        kept = {t.id for t in chosen}
        # A selected test keeps only the requirements that are also selected (running a perf test alone is allowed).
        chosen = tuple(
            TestSpec(**{**t.__dict__, "requires": tuple(r for r in t.requires if r in kept)}) for t in chosen
        )
        digest = hashlib.sha256((self.sha256 + "|" + ",".join(sorted(kept))).encode()).hexdigest()
        return Rubric(**{**self.__dict__, "tests": chosen, "sha256": digest})


def _need(table: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in table:
        raise RubricError(f"{where}: missing field {key!r}")
    value = table[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise RubricError(f"{where}: field {key!r} must be {kind}, got {value!r}")
    return value


def _test_from_table(table: dict[str, Any], index: int) -> TestSpec:
    where = f"test #{index + 1} ({table.get('id', '?')})"
    known = set(TestSpec.__dataclass_fields__)
    unknown = set(table) - known
    if unknown:
        raise RubricError(f"{where}: unknown field(s) {sorted(unknown)}")
    kind = _need(table, "kind", str, where)
    if kind not in KINDS:
        raise RubricError(f"{where}: kind must be one of {KINDS}, got {kind!r}")
    problem_name = _need(table, "problem", str, where)
    # imported here, not with this module: grader.sandbox needs only Limits, and the grader process starts its warm
    # kernel servers (grader/warmstart.py) before it imports NumPy, which grader.problems does
    from grader import problems

    try:
        problem = problems.get(problem_name)
    except problems.UnknownProblem as exc:
        raise RubricError(f"{where}: {exc} (one module per problem in grader/problems/)") from None
    file = _need(table, "file", str, where)
    if file not in SUBMISSION_FILES:
        raise RubricError(f"{where}: file must be one of {SUBMISSION_FILES}, got {file!r}")
    points = float(_need(table, "points", (int, float), where))
    if points < 0:
        raise RubricError(f"{where}: points must be >= 0")
    cases = _need(table, "cases", list, where)
    if not cases or not all(isinstance(c, dict) for c in cases):
        raise RubricError(f"{where}: cases must be a non-empty list of tables")
    if kind == "performance" and len(cases) != 1:
        raise RubricError(f"{where}: a performance test has exactly one case")
    visibility = table.get("visibility", "visible")
    if visibility not in VISIBILITIES:
        raise RubricError(f"{where}: visibility must be one of {VISIBILITIES}")
    thresholds = dict(table.get("thresholds", {}))
    if kind == "performance":
        source = thresholds.get("source")
        sources = (*problem.threshold_sources, "reference", "fixed")
        if source not in sources:
            raise RubricError(f"{where}: performance tests need thresholds.source = "
                              + ", ".join(repr(s) for s in sources[:-1]) + f" or {sources[-1]!r}")
        if source == "reference" and not isinstance(thresholds.get("key"), str):
            raise RubricError(f"{where}: thresholds.source = 'reference' needs a 'key'")
        basis = thresholds.get("basis")
        if basis is not None and basis not in ("reference", "published"):
            raise RubricError(f"{where}: thresholds.basis must be 'reference' or 'published', got {basis!r}")
        if source == "fixed" and not isinstance(thresholds.get("optimized_us"), (int, float)):
            raise RubricError(
                f"{where}: thresholds.source = 'fixed' needs 'optimized_us' (and optionally 'relaxed_us')"
            )
    timeout = float(table.get("timeout_s", 120))
    if not 0 < timeout <= 3600:
        raise RubricError(f"{where}: timeout_s must be in (0, 3600]")
    return TestSpec(
        id=_need(table, "id", str, where),
        name=_need(table, "name", str, where),
        part=int(_need(table, "part", int, where)),
        file=file,
        function=_need(table, "function", str, where),
        kind=kind,
        problem=problem_name,
        points=points,
        cases=tuple(dict(c) for c in cases),
        timeout_s=timeout,
        extra_credit=bool(table.get("extra_credit", False)),
        visibility=visibility,
        requires=tuple(table.get("requires", ())),
        thresholds=thresholds,
        disallowed_apis=_api_names(table.get("disallowed_apis", []), where),
    )


def _api_names(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v.startswith("nki.") for v in value):
        raise RubricError(f"{where}: disallowed_apis must be a list of names under nki., e.g. 'nki.language.transpose'")
    return tuple(value)


def _limits(table: dict[str, Any], path: Path) -> Limits:
    fields = Limits.__dataclass_fields__
    unknown = set(table) - set(fields)
    if unknown:
        raise RubricError(f"{path}: [limits] has unknown field(s) {sorted(unknown)}")
    values: dict[str, Any] = {}
    for key, value in table.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
            raise RubricError(f"{path}: [limits] {key} must be a positive number, got {value!r}")
        values[key] = float(value) if key == "import_timeout_s" else int(value)
    return Limits(**values)


def _borderline_margin(head: dict[str, Any], path: Path) -> float:
    value = head.get("borderline_margin", 0.15)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value < 1.0:
        raise RubricError(f"{path}: rubric.borderline_margin must be a number in [0, 1), got {value!r}")
    return float(value)


def _leaderboard(table: Any, tests: tuple[TestSpec, ...], path: Path) -> LeaderboardSpec:
    if not isinstance(table, dict):
        raise RubricError(f"{path}: [leaderboard] must be a table")
    unknown = set(table) - {"score_tests", "entries", "ranked_only"}
    if unknown:
        raise RubricError(f"{path}: [leaderboard] has unknown field(s) {sorted(unknown)}")
    perf = {t.id for t in tests if t.kind == "performance"}
    score_tests = table.get("score_tests", [])
    if not isinstance(score_tests, list) or not all(isinstance(t, str) and t in perf for t in score_tests):
        raise RubricError(f"{path}: leaderboard.score_tests must list performance test ids, got {score_tests!r}")
    entries = []
    for i, e in enumerate(table.get("entries", [])):
        where = f"{path}: leaderboard.entries[{i}]"
        if not isinstance(e, dict) or set(e) - {"name", "metric", "test", "order"}:
            raise RubricError(f"{where}: a table with name, metric and (unless metric = 'score') test")
        name, metric, test = e.get("name"), e.get("metric"), e.get("test", "")
        if not isinstance(name, str) or not name.strip():
            raise RubricError(f"{where}: needs a name")
        if metric not in LEADERBOARD_METRICS:
            raise RubricError(f"{where}: metric must be one of {sorted(LEADERBOARD_METRICS)}, got {metric!r}")
        if metric == "score" and not score_tests:
            raise RubricError(f"{where}: metric 'score' needs leaderboard.score_tests")
        if metric != "score" and test not in perf:
            raise RubricError(f"{where}: test must be a performance test id, got {test!r}")
        order = e.get("order", LEADERBOARD_METRICS[metric])
        if order not in ("asc", "desc"):
            raise RubricError(f"{where}: order must be 'asc' or 'desc', got {order!r}")
        entries.append(LeaderboardEntry(name, metric, test if metric != "score" else "", order))
    ranked_only = table.get("ranked_only", True)
    if not isinstance(ranked_only, bool):
        raise RubricError(f"{path}: leaderboard.ranked_only must be true or false")
    return LeaderboardSpec(tuple(score_tests), tuple(entries), ranked_only)


def load_limits(path: str | Path | None = None) -> Limits:
    """The ``[limits]`` of a rubric file alone, as :func:`load_rubric` reads them: what the grader process starts its
    warm kernel servers with before it imports the rest of the grader (grader/warmstart.py); the grading itself
    loads and validates the whole rubric as before."""
    path = Path(path) if path else DEFAULT_RUBRIC
    try:
        data = tomllib.loads(path.read_bytes().decode("utf-8"))
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise RubricError(f"cannot read rubric {path}: {exc}") from exc
    return _limits(data.get("limits", {}), path)


def load_rubric(path: str | Path | None = None) -> Rubric:
    """Parse and validate a rubric file (default: the course rubric shipped with the grader)."""
    path = Path(path) if path else DEFAULT_RUBRIC
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise RubricError(f"cannot read rubric {path}: {exc}") from exc
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise RubricError(f"{path}: not valid TOML: {exc}") from exc
    head = data.get("rubric", {})
    tests = tuple(_test_from_table(t, i) for i, t in enumerate(data.get("test", [])))
    if not tests:
        raise RubricError(f"{path}: no [[test]] entries")
    ids = [t.id for t in tests]
    dupes = {i for i in ids if ids.count(i) > 1}
    if dupes:
        raise RubricError(f"{path}: duplicate test ids {sorted(dupes)}")
    for t in tests:
        for req in t.requires:
            if req not in ids:
                raise RubricError(f"{path}: test {t.id} requires unknown test {req!r}")
            if req == t.id:
                raise RubricError(f"{path}: test {t.id} requires itself")
    tolerances = {dtype: (float(v["rtol"]), float(v["atol"])) for dtype, v in data.get("tolerances", {}).items()}
    limits = _limits(data.get("limits", {}), path)
    return Rubric(
        title=str(head.get("title", "autograder")),
        version=int(head.get("version", 1)),
        seed=int(head.get("seed", 42)),
        partial_credit=float(head.get("partial_credit", 0.9)),
        threshold_factor=float(head.get("threshold_factor", 1.2)),
        borderline_margin=_borderline_margin(head, path),
        verify_performance_outputs=bool(head.get("verify_performance_outputs", True)),
        limits=limits,
        tolerances=tolerances or {"float32": (1e-5, 1e-8)},
        tests=tests,
        sha256=hashlib.sha256(raw).hexdigest(),
        path=str(path),
        leaderboard=_leaderboard(data.get("leaderboard", {}), tests, path),
    )
