"""``python -m grader leaderboard OUT/``: one self-contained HTML page ranking a graded batch.

The page works offline (no CDN, no fonts, no requests: its Content-Security-Policy forbids them), sorts by any
column (click a header; keyboard too), and shows pseudonyms unless the TA asks for names (``--names``).  It ranks
only ranked runs: results graded with the class seed the batch was last graded with (its fingerprint, in
OUT/.grader/seed-fingerprint; grader/seeds.py).  A student's own runs
(per-submission seeds), results of an older seed and grader errors are left out and counted on the page.

Score (grader/ranking.py): the geometric mean of the rubric's leaderboard.score_tests p99 latencies, for
submissions whose timed runs all count.  Every performance test has a column of its own, with a mark where the
latency lies within the rubric's borderline_margin of a tier target (a model's estimate that Trainium may
change).  Pseudonyms are derived from the student id with a key kept in OUT/.grader/pseudonym-key, so they stay
the same across regrades and seed rotations and cannot be recomputed from a list of student ids.
"""

from __future__ import annotations

import csv
import hashlib
import hmac
import html
import json
import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grader import ranking, seeds
from grader.reports import atomic_write
from grader.rubric import Rubric, load_rubric

PSEUDONYM_KEY = "pseudonym-key"
PAGE = "leaderboard.html"
# Nothing but the page's own inline style and script: no request can leave it, even by mistake.
CSP = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'"
ADJECTIVES = (
    "Amber Brisk Calm Dapper Eager Fabled Gentle Hardy Icy Jolly Keen Lucid Mellow Nimble Opal Plucky Quiet Rapid "
    "Sly Tidy Upbeat Vivid Witty Young Zesty Bold Clever Daring Fierce Gallant Humble Jade Lively Merry Noble Proud "
    "Rustic Sunny Swift Trusty Velvet Wise Azure Coral Dusky Golden Misty Silver"
).split()
ANIMALS = (
    "Otter Lynx Heron Falcon Badger Marten Ibex Koala Lemur Puffin Quokka Raven Stoat Tapir Urchin Vole Walrus Yak "
    "Zebra Bison Crane Dingo Egret Ferret Gecko Hare Jackal Kiwi Llama Moose Newt Ocelot Panda Robin Seal Tern Wombat "
    "Beaver Cobra Dolphin Eagle Finch Gibbon Hyena Iguana Kestrel Magpie Narwhal"
).split()


class LeaderboardError(ValueError):
    """The batch directory cannot be ranked (no results, no class seed); the message says what to do."""


@dataclass
class Cell:
    latency_us: float | None
    status: str
    counts: bool
    mfu: float | None = None
    near: bool = False
    distance: float | None = None


@dataclass
class Row:
    student: str
    score: float | None
    points: float
    cells: dict[str, Cell]
    shown: str = ""
    rank: int | None = None
    near: list[str] = field(default_factory=list)
    api: str = ""  # the NKI API(s) of the submission's files (grader/apis.py), e.g. "nki" or "legacy"


def _apis(record: dict[str, Any]) -> str:
    found = record.get("apis")
    return "+".join(sorted({str(v) for v in found.values()})) if isinstance(found, dict) else ""


# ----------------------------------------------------------------------------------------------- records ----


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def load_records(out_root: Path) -> list[dict[str, Any]]:
    """The current result of every student: the result directories gradebook.csv names (the last batch run), or
    without a gradebook, each student's most recent result.json."""
    book = out_root / "gradebook.csv"
    records: list[dict[str, Any]] = []
    if book.exists():
        with open(book, newline="") as fh:
            for row in csv.DictReader(fh):
                if row.get("result_dir"):
                    rec = _read_json(Path(row["result_dir"]) / "result.json")
                    if rec is not None:
                        records.append(rec)
        return records
    newest: dict[str, dict[str, Any]] = {}
    for path in out_root.glob("*/*/result.json"):
        rec = _read_json(path)
        if rec is not None:
            who = str(rec.get("student", path.parent.parent.name))
            if who not in newest or str(rec.get("started_at", "")) > str(newest[who].get("started_at", "")):
                newest[who] = rec
    return list(newest.values())


def _cells(record: dict[str, Any], perf_tests: list[str]) -> dict[str, Cell]:
    tests = {str(t.get("id")): t for t in record.get("tests", []) if isinstance(t, dict)}
    counted = ranking.counted_latencies(tests.values())
    cells = {}
    for tid in perf_tests:
        t = tests.get(tid, {})
        mfu = t.get("mfu")
        cells[tid] = Cell(
            latency_us=counted.get(tid),
            status=str(t.get("status", "missing")),
            counts=tid in counted,
            mfu=float(mfu) if isinstance(mfu, int | float) else None,
            near=bool(t.get("near_boundary")) and tid in counted,
            distance=t.get("boundary_distance") if isinstance(t.get("boundary_distance"), int | float) else None,
        )
    return cells


def rank(records: list[dict[str, Any]], rubric: Rubric, fp: str | None) -> tuple[list[Row], dict[str, int]]:
    """Rows of the ranked runs of the class seed with fingerprint ``fp`` (best score first, unscored last) and the
    count of left-out results by reason."""
    perf_tests = [t.id for t in rubric.tests if t.kind == "performance"]
    rows: list[Row] = []
    left_out: dict[str, int] = {}
    for rec in records:
        if rec.get("status") != "graded":
            reason = "grader error (regraded on the next batch run)"
        elif rec.get("seed_mode") != "secret":
            reason = "not a ranked run (a per-submission seed)"
        elif fp is not None and rec.get("seed_fingerprint") != fp:
            reason = "graded with another class seed"
        else:
            cells = _cells(rec, perf_tests)
            latencies = {t: c.latency_us for t, c in cells.items() if c.latency_us is not None}
            row = Row(str(rec.get("student", "")), ranking.score(latencies, rubric.leaderboard),
                      float(rec.get("score", 0.0)), cells)
            row.near = [t for t, c in cells.items() if c.near]
            row.api = _apis(rec)
            rows.append(row)
            continue
        left_out[reason] = left_out.get(reason, 0) + 1
    rows.sort(key=lambda r: (r.score is None, r.score or 0.0, -r.points, r.student))
    for i, r in enumerate(x for x in rows if x.score is not None):
        r.rank = i + 1
    return rows, left_out


# -------------------------------------------------------------------------------------------- pseudonyms ----


def pseudonym_key(out_root: Path) -> bytes:
    """The batch's pseudonym key (created on first use, readable by the grader's user only)."""
    private = seeds.ensure_private_dir(seeds.private_dir(out_root))
    path = private / PSEUDONYM_KEY
    try:
        key = bytes.fromhex(path.read_text().strip())
        if len(key) >= 16:
            return key
    except (OSError, ValueError):
        pass
    key = secrets.token_bytes(32)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(key.hex() + "\n")
    os.replace(tmp, path)
    return key


def pseudonyms(students: list[str], key: bytes) -> dict[str, str]:
    """A stable "Adjective Animal NN" per student; a clash gets a letter suffix (in digest order)."""
    digests = {s: hmac.new(key, s.encode(), hashlib.sha256).digest() for s in students}
    out: dict[str, str] = {}
    taken: dict[str, int] = {}
    for s in sorted(students, key=lambda x: digests[x]):
        d = digests[s]
        name = f"{ADJECTIVES[d[0] % len(ADJECTIVES)]} {ANIMALS[d[1] % len(ANIMALS)]} {d[2] % 100:02d}"
        n = taken.get(name, 0)
        taken[name] = n + 1
        out[s] = name if n == 0 else f"{name}{chr(ord('a') + n - 1)}"
    return out


# ------------------------------------------------------------------------------------------------- page ----

CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px;color:#1d2330;background:#fff}
h1{font-size:20px;margin:0 0 4px} p.meta{color:#555;margin:2px 0}
table{border-collapse:collapse;margin-top:14px;font-variant-numeric:tabular-nums}
th,td{border-bottom:1px solid #e3e6ec;padding:5px 10px;text-align:right;white-space:nowrap}
th{position:sticky;top:0;background:#f6f7f9;vertical-align:bottom}
th button{font:inherit;font-weight:600;border:0;background:none;cursor:pointer;padding:0;text-align:right}
th[aria-sort=ascending] button::after{content:" \\25B2"} th[aria-sort=descending] button::after{content:" \\25BC"}
td.name,th.name{text-align:left} tr:nth-child(even) td{background:#fafbfc}
td.full{color:#116329} td.partial{color:#9a6700} td.none{color:#8c959f}
td .near{color:#cf222e;font-weight:700;margin-left:3px} td.unranked{color:#8c959f}
.legend{color:#555;margin-top:10px;font-size:13px}
"""

SCRIPT = """
(function () {
  var table = document.getElementById("leaderboard");
  var heads = Array.prototype.slice.call(table.tHead.rows[0].cells);
  function value(row, i, numeric) {
    var v = row.cells[i].getAttribute("data-v");
    if (v === null || v === "") return null;
    return numeric ? parseFloat(v) : v.toLowerCase();
  }
  function sortBy(i, dir) {
    var numeric = heads[i].getAttribute("data-type") === "num";
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.forEach(function (r, k) { r._k = k; });
    rows.sort(function (a, b) {
      var x = value(a, i, numeric), y = value(b, i, numeric);
      if (x === null || y === null) return (x === null) - (y === null) || a._k - b._k;  // blanks last, always
      var c = x < y ? -1 : x > y ? 1 : 0;
      return (dir === "ascending" ? c : -c) || a._k - b._k;
    });
    rows.forEach(function (r) { body.appendChild(r); });
    heads.forEach(function (h) { h.removeAttribute("aria-sort"); });
    heads[i].setAttribute("aria-sort", dir);
  }
  heads.forEach(function (h, i) {
    h.querySelector("button").addEventListener("click", function () {
      var first = h.getAttribute("data-first") || "ascending";
      var other = first === "ascending" ? "descending" : "ascending";
      sortBy(i, h.getAttribute("aria-sort") === first ? other : first);
    });
  });
  window.leaderboard = { sortBy: sortBy, ready: true };
})();
"""


def _num(v: float | None, digits: int = 1) -> str:
    return "" if v is None else f"{v:.{digits}f}"


def _th(label: str, *, numeric: bool, first: str = "ascending", cls: str = "", sort: str | None = None,
        title: str = "") -> str:
    attrs = f' data-type="{"num" if numeric else "text"}" data-first="{first}"'
    attrs += f' class="{cls}"' if cls else ""
    attrs += f' aria-sort="{sort}"' if sort else ""
    attrs += f' title="{html.escape(title)}"' if title else ""
    return f'<th scope="col"{attrs}><button type="button">{html.escape(label)}</button></th>'


def _test_cell(c: Cell) -> str:
    if c.latency_us is None:
        return f'<td class="unranked" data-v="">{html.escape(c.status)}</td>'
    tier = {"passed": "full", "partial": "partial"}.get(c.status, "none")
    title = f"{c.status}" + (f", MFU {100 * c.mfu:.1f}%" if c.mfu else "")
    mark = ""
    if c.near:
        title += f", {100 * (c.distance or 0):.1f}% from a tier target: may differ on Trainium"
        mark = '<span class="near" aria-label="near a target">&#9670;</span>'
    return f'<td class="{tier}" data-v="{c.latency_us:.3f}" title="{html.escape(title)}">{c.latency_us:.1f}{mark}</td>'


def render(rows: list[Row], rubric: Rubric, *, left_out: dict[str, int], fp: str | None, names: bool) -> str:
    perf = [t for t in rubric.tests if t.kind == "performance"]
    heads = [
        _th("#", numeric=True, sort="ascending"),
        _th("student" if names else "pseudonym", numeric=False, cls="name"),
        _th("score (us)", numeric=True, title="geometric mean of the p99 latencies of: "
            + ", ".join(rubric.leaderboard.score_tests)),
        *[_th(t.id.split(".", 1)[-1], numeric=True, title=f"{t.name}: modelled p99 latency (us)") for t in perf],
        _th("points", numeric=True, first="descending"),
        _th("near a target", numeric=True, first="descending",
            title=f"performance results within {rubric.borderline_margin:.0%} of a tier target"),
        _th("API", numeric=False, title="the NKI API the submission's files import (nki: current; legacy: "
            "neuronxcc.nki); each file is timed against the staff kernel of its own API"),
    ]
    body = []
    for r in rows:
        cells = [
            f'<td data-v="{r.rank if r.rank is not None else ""}">{r.rank if r.rank is not None else ""}</td>',
            f'<td class="name" data-v="{html.escape(r.shown)}">{html.escape(r.shown)}</td>',
            f'<td data-v="{_num(r.score, 3)}">{_num(r.score) or "&ndash;"}</td>',
            *[_test_cell(r.cells[t.id]) for t in perf],
            f'<td data-v="{r.points:g}">{r.points:g}</td>',
            f'<td data-v="{len(r.near)}" title="{html.escape(", ".join(r.near))}">{len(r.near) or ""}</td>',
            f'<td data-v="{html.escape(r.api)}">{html.escape(r.api)}</td>',
        ]
        body.append("<tr>" + "".join(cells) + "</tr>")
    ranked = sum(1 for r in rows if r.rank is not None)
    seed_note = f"class seed #{fp}" if fp is not None else "the class seed"
    out_note = "; ".join(f"{n} {why}" for why, n in sorted(left_out.items())) or "none"
    score_of = ", ".join(html.escape(t) for t in rubric.leaderboard.score_tests)
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Leaderboard: {html.escape(rubric.title)}</title>
<style>{CSS}</style>
</head>
<body>
<h1>Leaderboard: {html.escape(rubric.title)}</h1>
<p class="meta">{ranked} ranked of {len(rows)} submissions graded with {seed_note}; generated
{time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}. Left out: {html.escape(out_note)}.</p>
<p class="meta">Score: geometric mean of the modelled p99 latencies of {score_of} (lower is better), for submissions
whose timed runs all produced the reference output with the work done on the device. Latencies are nkisim's
model of one NeuronCore; <span class="near">&#9670;</span> marks a result within
{rubric.borderline_margin:.0%} of a tier target, where Trainium may differ. Click a column to sort.</p>
<table id="leaderboard">
<thead><tr>{"".join(heads)}</tr></thead>
<tbody>
{chr(10).join(body)}
</tbody>
</table>
<p class="legend">{"Students are named by their ids." if names else "Students appear under pseudonyms."}
Green: full credit; amber: partial credit; grey: no credit or not counted.</p>
<script>{SCRIPT}</script>
</body>
</html>
"""


def write_leaderboard(
    out_root: str | Path,
    *,
    dest: str | Path | None = None,
    names: bool = False,
    rubric_path: str | None = None,
    seed_file: str | Path | None = None,
) -> tuple[Path, list[Row], dict[str, int]]:
    """Rank the batch in ``out_root`` and write the page (default OUT/leaderboard.html, atomically)."""
    out = Path(out_root)
    if not out.is_dir():
        raise LeaderboardError(f"{out} is not a directory of batch results")
    if seed_file:
        fp = seeds.fingerprint(seeds.read_seed(seed_file))
    else:
        fp = seeds.current_fingerprint(seeds.private_dir(out))
        if fp is None:
            raise LeaderboardError(f"no class seed recorded in {seeds.private_dir(out)}: grade the class with "
                                   "`python -m grader batch` first (ranked runs use the class's secret seed), or pass "
                                   "--seed-file")
    records = load_records(out)
    if not records:
        raise LeaderboardError(f"no results in {out} (expected gradebook.csv or <student>/<hash>/result.json)")
    rubric = load_rubric(rubric_path)
    rows, left_out = rank(records, rubric, fp)
    shown = ({r.student: r.student for r in rows} if names
             else pseudonyms([r.student for r in rows], pseudonym_key(out)))
    for r in rows:
        r.shown = shown[r.student]
    target = Path(dest) if dest else out / PAGE
    atomic_write(target, render(rows, rubric, left_out=left_out, fp=fp, names=names))
    return target, rows, left_out
