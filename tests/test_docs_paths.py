"""The repository's own files named in its prose exist: a doc or a rubric comment that still points at a moved file
(grader/problems.py became the package grader/problems/) sends a reader to nothing."""
from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# The prose that names repository files: the docs, the rubric's comments, the architecture and model notes.
PROSE = (
    *sorted((REPO / "docs").glob("*.md")), REPO / "README.md", REPO / "README.student.md",
    REPO / "grader" / "rubric.toml", REPO / "nkisim" / "ARCHITECTURE.md", REPO / "nkisim" / "perf" / "MODEL.md",
    *sorted((REPO / "handouts").glob("*.md")),
)
# A repository path: a top-level package or folder, then a file with an extension.  Not part of a longer path
# (`~/.cache/nkibench/pairs/pairs.jsonl` is the user's cache, not the repository's nkibench/).
TOP = ("nkisim", "grader", "tools", "nkibench", "part1", "part2", "staff", "handouts", "tests", "docs", "editions")
REPO_PATH = re.compile(rf"(?<![\w./~-])(?:{'|'.join(TOP)})/[\w/.-]*?\w\.(?:py|toml|md|json|jsonl|txt)(?!\w|\.\w)")


def test_repository_paths_in_prose_exist():
    assert all(p.is_file() for p in PROSE), [str(p) for p in PROSE if not p.is_file()]
    missing = sorted({f"{doc.relative_to(REPO)}: {path}" for doc in PROSE
                      for path in REPO_PATH.findall(doc.read_text(encoding="utf-8"))
                      if "<" not in path and not (REPO / path).exists()})
    assert missing == []


def test_the_path_pattern_finds_a_stale_path_and_skips_cache_paths():
    text = "(grader/problems.py: submission_seed) and `~/.cache/nkibench/pairs/pairs.jsonl`, tests/test_release.py."
    assert REPO_PATH.findall(text) == ["grader/problems.py", "tests/test_release.py"]
