"""Builds the student repository: ``python tools/release.py [--out release]`` (``make release``).

Copies every tracked (or not ignored) file except the staff-only ones into ``OUT/asst4-trainium/`` and packs
it as ``OUT/asst4-trainium.tar.gz``.  Staff-only means: the reference solutions (``grader/reference/``), the
tests that need them, and anything listed in ``.release-exclude`` (one glob per line, ``#`` comments; a line
starting with ``!`` releases paths an earlier line excluded).  The students' README (``README.student.md``)
becomes the release's ``README.md``.  As a last guard, no released file may contain the staff marker string that
every staff-only file carries.
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
NAME = "asst4-trainium"
# Spelled in two pieces so this file does not carry the marker itself.
STAFF_MARKER = "STAFF" + "-ONLY"
ALWAYS_EXCLUDED = (
    "grader/reference/*",
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


def build(out_dir: Path, repo: Path = REPO) -> tuple[Path, Path]:
    files = release_files(repo)
    check_no_staff_content(repo, files)
    out_dir.mkdir(parents=True, exist_ok=True)
    tree = out_dir / NAME
    staging = out_dir / f".{NAME}.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    for rel in files:
        dst = staging / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo / rel, dst, follow_symlinks=False)
    readme = repo / STUDENT_README
    if readme.is_file():
        check_no_staff_content(repo, [STUDENT_README])
        shutil.copy2(readme, staging / "README.md")
        files = sorted({*files, "README.md"})
    # Student repositories get the autograder workflow active (runs the grader on every push, posts the score).
    workflow = repo / WORKFLOW_TEMPLATE
    if workflow.exists():
        (staging / WORKFLOW_DEST).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(workflow, staging / WORKFLOW_DEST)
        files = [*files, WORKFLOW_DEST]
    shutil.rmtree(tree, ignore_errors=True)
    os.replace(staging, tree)

    tarball = out_dir / f"{NAME}.tar.gz"
    tmp_tar = out_dir / f".{NAME}.tar.gz.tmp"
    with tarfile.open(tmp_tar, "w:gz") as tar:
        for rel in files:
            tar.add(tree / rel, arcname=f"{NAME}/{rel}")
    os.replace(tmp_tar, tarball)
    return tree, tarball


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(REPO / "release"), help="output directory (default: release/)")
    args = parser.parse_args(argv)
    try:
        tree, tarball = build(Path(args.out).resolve())
    except ReleaseError as exc:
        print(f"release: {exc}", file=sys.stderr)
        return 1
    count = sum(1 for p in tree.rglob("*") if p.is_file() or p.is_symlink())
    print(f"Student repository: {tree} ({count} files)")
    print(f"Tarball: {tarball}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
