"""Builds the student repository: ``python tools/release.py [--out release] [--api nki|legacy]`` (``make release``,
``make release API=legacy``).

Copies every tracked (or not ignored) file except the staff-only ones into ``OUT/asst4-trainium/`` and packs
it as ``OUT/asst4-trainium.tar.gz``.  Staff-only means: the reference solutions (``grader/reference/``), the
tests that need them, ``.release-exclude`` itself and anything it lists (one glob per line, ``#`` comments; a
line starting with ``!`` releases paths an earlier line excluded), and the Makefile's staff blocks (its
``release`` and ``gradescope`` targets, between ``# release: staff begin`` and ``# release: staff end``).
The students' README (``README.student.md``) becomes the release's ``README.md``.  As a last guard, no released
file may contain the staff marker string that every staff-only file carries.

Two editions share everything but the kernel files.  ``--api nki`` (the default) releases the repository's own
starters (current NKI API, ``import nki``: SDK 2.30+).  ``--api legacy`` (into ``asst4-trainium-legacy``) puts
``editions/legacy/<path>`` at ``<path>`` (the ``neuronxcc.nki`` starters, for SDK <= 2.29) and makes the legacy
API the scripts' default (``nkibench.detect.DEFAULT_API``).  In every released Markdown file, blocks between
``<!-- api:NAME begin ... -->`` and ``<!-- api:NAME end -->`` are kept (without the markers) for the edition's
API and dropped for the other one.
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
NAME = "asst4-trainium"
APIS = ("nki", "legacy")
DEFAULT_API = "nki"
# Per-edition files live here, at the path they take in that edition's release (never released as such).
EDITIONS_DIR = "editions"
# The one line of the timing layer that names the edition's API (kernels importing neither API take it).
DEFAULT_API_FILE = "nkibench/detect.py"
DEFAULT_API_LINE = 'DEFAULT_API = "{api}"\n'
# A marker is a line of its own (a marker quoted inside other text, as in the docs, is text).
API_BLOCK = re.compile(r"<!-- api:(\w+) (begin|end)\b[^>]*-->")
# Spelled in two pieces so this file does not carry the marker itself.
STAFF_MARKER = "STAFF" + "-ONLY"
ALWAYS_EXCLUDED = (
    ".release-exclude",  # the exclusion list itself names the staff material (the audit's open gaps, ...)
    "grader/reference/*",
    f"{EDITIONS_DIR}/*",
    "tests/test_reference*",
    ".git/*",
    ".venv/*",
    "release/*",
    "*/__pycache__/*",
    "*.pyc",
    ".pytest_cache/*",
    ".ruff_cache/*",
    ".hypothesis/*",
    ".nkisim-cache/*",
    "asst4.tar.gz",
    "autograder.zip",
    "*.neff",
    "*.ntff",
)


class ReleaseError(RuntimeError):
    pass


# Staff-only stretches of released text files that are otherwise the students' too (the Makefile's `release` and
# `gradescope` targets build from folders the release does not have): dropped, with their marker lines, from the
# released copy.  A marker is a whole line: `# release: staff begin` ... `# release: staff end`.
STAFF_BLOCK = re.compile(r"#\s*release:\s*staff\s+(begin|end)\b.*")
STAFF_BLOCK_FILES = ("Makefile",)


def strip_staff_blocks(text: str, where: str = "<text>") -> str:
    """``text`` without its staff blocks (markers included); unbalanced markers are an error naming the line."""
    out: list[str] = []
    inside = 0
    for number, line in enumerate(text.splitlines(keepends=True), 1):
        marker = STAFF_BLOCK.fullmatch(line.strip())
        if marker is None:
            if not inside:
                out.append(line)
        elif marker.group(1) == "begin":
            if inside:
                raise ReleaseError(f"{where}:{number}: a staff block begins inside the staff block of line {inside}")
            inside = number
        else:
            if not inside:
                raise ReleaseError(f"{where}:{number}: a staff block ends without its begin")
            inside = 0
    if inside:
        raise ReleaseError(f"{where}: the staff block of line {inside} is never closed")
    return "".join(out)


WORKFLOW_TEMPLATE = "grader/templates/github-workflow.yml"
WORKFLOW_DEST = ".github/workflows/autograder.yml"
# The students' README replaces the staff one (which is about the course repository and its TA tools).
STUDENT_README = "README.student.md"


def candidate_files(repo: Path) -> list[str]:
    """Files git would ship (tracked + untracked but not ignored); a plain walk outside a git checkout."""
    try:
        top = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"], cwd=repo, check=True, capture_output=True, text=True
        ).stdout.strip()
        if Path(top).resolve() != repo.resolve():
            raise ValueError("not the top of a git checkout")
        out = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
            cwd=repo,
            check=True,
            capture_output=True,
        ).stdout.decode()
        files = [f for f in out.split("\0") if f]
    except (OSError, ValueError, subprocess.CalledProcessError):
        files = [str(p.relative_to(repo)) for p in repo.rglob("*") if p.is_file()]
    return sorted(f for f in files if (repo / f).is_file() or (repo / f).is_symlink())


def exclude_patterns(repo: Path) -> list[str]:
    """Glob patterns, in order; ``!pattern`` re-includes what an earlier pattern excluded (as in .gitignore)."""
    patterns = list(ALWAYS_EXCLUDED)
    extra = repo / ".release-exclude"
    if extra.is_file():
        for line in extra.read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if line:
                patterns.append(line.rstrip("/") + "/*" if line.endswith("/") else line)
    return patterns


def _matches(path: str, pat: str) -> bool:
    return fnmatch.fnmatch(path, pat) or fnmatch.fnmatch(path, pat.rstrip("/*"))


def is_excluded(path: str, patterns: list[str]) -> bool:
    """The last pattern that matches decides; the always-excluded ones cannot be re-included."""
    if any(_matches(path, pat) for pat in ALWAYS_EXCLUDED):
        return True
    excluded = False
    for pat in patterns:
        if pat.startswith("!"):
            if excluded and _matches(path, pat[1:]):
                excluded = False
        elif not excluded and _matches(path, pat):
            excluded = True
    return excluded


def release_files(repo: Path) -> list[str]:
    patterns = exclude_patterns(repo)
    return [f for f in candidate_files(repo) if not is_excluded(f, patterns) and f != STUDENT_README]


def check_no_staff_content(root: Path, files: list[str]) -> None:
    """Symlinks are released as links (never dereferenced), so only regular files are read."""
    leaked = []
    for rel in files:
        if (root / rel).is_symlink():
            continue
        try:
            if STAFF_MARKER in (root / rel).read_text(errors="ignore"):
                leaked.append(rel)
        except OSError:
            continue
    if leaked:
        raise ReleaseError(f"staff-only content would be released: {', '.join(leaked)}")


def render_api_blocks(text: str, api: str, where: str = "<text>") -> str:
    """``text`` with the blocks of ``api`` kept (markers removed) and every other API's blocks dropped."""
    out: list[str] = []
    open_api: str | None = None
    for number, line in enumerate(text.splitlines(keepends=True), 1):
        marker = API_BLOCK.fullmatch(line.strip())
        if marker is None:
            if open_api is None or open_api == api:
                out.append(line)
            continue
        name, edge = marker.groups()
        if name not in APIS:
            raise ReleaseError(f"{where}:{number}: unknown API {name!r} in an api block marker (known: {APIS})")
        if edge == "begin":
            if open_api is not None:
                raise ReleaseError(f"{where}:{number}: api:{name} begins inside the api:{open_api} block")
            open_api = name
        else:
            if open_api != name:
                raise ReleaseError(f"{where}:{number}: api:{name} end without its begin")
            open_api = None
    if open_api is not None:
        raise ReleaseError(f"{where}: the api:{open_api} block is never closed")
    return "".join(out)


def edition_files(repo: Path, api: str) -> dict[str, Path]:
    """Released path -> source file of the edition's own files (none for the default edition)."""
    if api == DEFAULT_API:
        return {}
    root = repo / EDITIONS_DIR / api
    if not root.is_dir():
        raise ReleaseError(f"no {EDITIONS_DIR}/{api}/ directory: the {api} edition has no files")
    files = sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    return {str(p.relative_to(root)): p for p in files}


def _set_default_api(path: Path, api: str) -> None:
    text = path.read_text()
    default = DEFAULT_API_LINE.format(api=DEFAULT_API)
    if text.count(default) != 1:
        raise ReleaseError(f"{DEFAULT_API_FILE} must hold the line {default.strip()!r} exactly once")
    path.write_text(text.replace(default, DEFAULT_API_LINE.format(api=api)))


def _render_markdown(staging: Path, files: list[str], api: str) -> None:
    for rel in files:
        path = staging / rel
        if rel.endswith(".md") and path.is_file() and not path.is_symlink():
            text = path.read_text(encoding="utf-8")
            rendered = render_api_blocks(text, api, rel)
            if rendered != text:
                path.write_text(rendered, encoding="utf-8")


def release_name(api: str) -> str:
    return NAME if api == DEFAULT_API else f"{NAME}-{api}"


def build(out_dir: Path, repo: Path = REPO, api: str = DEFAULT_API) -> tuple[Path, Path]:
    if api not in APIS:
        raise ReleaseError(f"unknown API {api!r}: choose one of {', '.join(APIS)}")
    files = release_files(repo)
    check_no_staff_content(repo, files)
    placed = edition_files(repo, api)
    missing = sorted(rel for rel in placed if rel not in files)
    if missing:
        raise ReleaseError(f"{EDITIONS_DIR}/{api}/ holds files the release does not ship: {', '.join(missing)}")
    check_no_staff_content(repo, [str(p.relative_to(repo)) for p in placed.values()])
    name = release_name(api)
    out_dir.mkdir(parents=True, exist_ok=True)
    tree = out_dir / name
    staging = out_dir / f".{name}.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    for rel in files:
        dst = staging / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(placed.get(rel, repo / rel), dst, follow_symlinks=False)
    if api != DEFAULT_API:
        _set_default_api(staging / DEFAULT_API_FILE, api)
    readme = repo / STUDENT_README
    if readme.is_file():
        check_no_staff_content(repo, [STUDENT_README])
        shutil.copy2(readme, staging / "README.md")
        files = sorted({*files, "README.md"})
    _render_markdown(staging, files, api)
    for rel in STAFF_BLOCK_FILES:
        path = staging / rel
        if rel in files and path.is_file() and not path.is_symlink():
            path.write_text(strip_staff_blocks(path.read_text(encoding="utf-8"), rel), encoding="utf-8")
    # Student repositories get the autograder workflow active (runs the grader on every push, posts the score).
    workflow = repo / WORKFLOW_TEMPLATE
    if workflow.exists():
        (staging / WORKFLOW_DEST).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(workflow, staging / WORKFLOW_DEST)
        files = [*files, WORKFLOW_DEST]
    shutil.rmtree(tree, ignore_errors=True)
    os.replace(staging, tree)

    tarball = out_dir / f"{name}.tar.gz"
    tmp_tar = out_dir / f".{name}.tar.gz.tmp"
    with tarfile.open(tmp_tar, "w:gz") as tar:
        for rel in files:
            tar.add(tree / rel, arcname=f"{name}/{rel}")
    os.replace(tmp_tar, tarball)
    return tree, tarball


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(REPO / "release"), help="output directory (default: release/)")
    parser.add_argument("--api", default=DEFAULT_API, choices=APIS,
                        help="edition: nki (current API, SDK 2.30+; default) or legacy (neuronxcc.nki, SDK <= 2.29)")
    args = parser.parse_args(argv)
    try:
        tree, tarball = build(Path(args.out).resolve(), api=args.api)
    except ReleaseError as exc:
        print(f"release: {exc}", file=sys.stderr)
        return 1
    count = sum(1 for p in tree.rglob("*") if p.is_file() or p.is_symlink())
    print(f"Student repository ({args.api} edition): {tree} ({count} files)")
    print(f"Tarball: {tarball}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
