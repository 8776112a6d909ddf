"""make release / make submission: the student repository has no staff content, keeps what students need, and
its `make test` (the installation check) passes whatever state the student's files are in; the submission
tarball holds exactly the two kernel files.  Both editions: the default (current `import nki` API) and
`make release API=legacy` (neuronxcc.nki starters from editions/legacy/, the handout's legacy blocks)."""

from __future__ import annotations

import ast
import fnmatch
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
STAFF_REPO = (REPO / "grader" / "reference").is_dir()
sys.path.insert(0, str(REPO / "tools"))
import release  # noqa: E402

from nkibench.detect import api_of_source  # noqa: E402

# The staff solutions of each edition: a finished student's files.
SOLUTIONS = {"nki": REPO / "grader" / "reference", "legacy": REPO / "grader" / "reference" / "legacy"}


def _build(tmp_path_factory, api: str):
    if not STAFF_REPO:
        pytest.skip("already a student release (no grader/reference to strip)")
    out = tmp_path_factory.mktemp(f"release-{api}")
    return release.build(out, api=api)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return _build(tmp_path_factory, "nki")


@pytest.fixture(scope="module")
def built_legacy(tmp_path_factory):
    return _build(tmp_path_factory, "legacy")


@pytest.fixture(params=["nki", "legacy"])
def edition(request):
    return request.param, request.getfixturevalue("built" if request.param == "nki" else "built_legacy")


def test_release_strips_reference_solutions_and_keeps_student_files(edition):
    api, (tree, tarball) = edition
    files = {str(p.relative_to(tree)) for p in tree.rglob("*") if p.is_file() or p.is_symlink()}
    assert not any(f.startswith("grader/reference/") for f in files)
    assert not any(f.startswith("tests/test_reference") for f in files)
    for needed in (
        "README.md",
        "Makefile",
        "pyproject.toml",
        "part1/kernels.py",
        "part1/run_benchmark.py",
        "part2/conv2d.py",
        "part2/conv2d_numpy.py",
        "part2/test_harness.py",
        "handouts/handout.md",
        "nkisim/__init__.py",
        "grader/thresholds.py",
        "nkibench/__init__.py",  # the scripts' timing layer, with its helper processes for Trainium
        "nkibench/nki_child.py",
        "nkibench/nrt_child.py",
    ):
        assert needed in files, needed
    for f in files:
        if not (tree / f).is_symlink():
            assert release.STAFF_MARKER not in (tree / f).read_text(errors="ignore"), f
    assert "NotImplementedError" in (tree / "part2" / "conv2d.py").read_text()
    assert not any(f.startswith("editions/") for f in files)
    # the staff suite (whose fixtures include working kernels) and the ladder stay home; the check goes out
    assert {f for f in files if f.startswith("tests/")} == {"tests/conftest.py", "tests/test_setup_check.py"}
    assert not any(f.startswith("staff/") or f == "docs/staff-notes.md" for f in files)
    assert (tree / "README.md").read_text() == release.render_api_blocks(
        (REPO / "README.student.md").read_text(), api)
    assert "README.student.md" not in files
    assert tree.name == release.release_name(api) and tarball.name == f"{tree.name}.tar.gz"
    with tarfile.open(tarball) as tar:
        names = {n.removeprefix(f"{tree.name}/") for n in tar.getnames()}
    assert names == files


# Staff-only material, named here independently of .release-exclude (a second list, so that a path dropped from
# that file by mistake fails this test): the staff solutions and ladder, the staff and maintainer docs (the TAs'
# guide to batch grading on Ray among them), the staff tools and CI entry point, the exclusion list itself (it names
# the audit's open gaps), the staff suite.
STAFF_ONLY = (
    ".release-exclude", ".ci/*", "tools/*", "staff/*", "editions/*", "grader/reference/*",
    "nkisim/calibration/corpus/*", "docs/maintainers.md", "docs/staff-notes.md", "docs/grading-security.md",
    "docs/ray.md", "tests/test_*.py", "tests/*/*",
)
STUDENT_TESTS = {"tests/test_setup_check.py"}
STAFF_MAKE_TARGETS = {"release", "gradescope"}


def _make_targets(makefile: str) -> dict[str, list[str]]:
    """Target -> its recipe lines, from a Makefile's rules (``name: deps`` then tab-indented lines)."""
    targets: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in makefile.splitlines():
        if line.startswith("\t") and current is not None:
            current.append(line.strip())
            continue
        rule = re.match(r"^([A-Za-z][\w.-]*)\s*:(?!=)", line)
        current = targets.setdefault(rule.group(1), []) if rule and not rule.group(1).startswith(".") else None
    return targets


def test_release_file_list_has_nothing_staff_only(edition):
    """The release's own file list: no staff-only path, no file carrying the staff marker, and a Makefile whose
    every target runs from what the release holds (no `release` / `gradescope` target pointing at folders the
    release lacks)."""
    _, (tree, _) = edition
    files = sorted(str(p.relative_to(tree)) for p in tree.rglob("*") if p.is_file() or p.is_symlink())
    staff = [f for f in files if f not in STUDENT_TESTS and any(fnmatch.fnmatch(f, pat) for pat in STAFF_ONLY)]
    assert staff == [], f"staff-only files in the release: {staff}"
    makefile = (tree / "Makefile").read_text()
    targets = _make_targets(makefile)
    assert STAFF_MAKE_TARGETS.isdisjoint(targets), sorted(STAFF_MAKE_TARGETS & set(targets))
    assert {"setup", "test", "grade", "submission"} <= set(targets)
    assert "release: staff" not in makefile and "STAFF" not in makefile
    for target, recipe in targets.items():
        for path in re.findall(r"(?<![\w/.$-])((?:[\w-]+/)+[\w.-]+\.(?:py|sh|toml|yml))\b", " ".join(recipe)):
            assert (tree / path).exists(), f"make {target} runs {path}, which the release does not have"
    # the staff repository's own Makefile has both targets (the block is dropped, not the targets from staff)
    assert STAFF_MAKE_TARGETS <= set(_make_targets((REPO / "Makefile").read_text()))


# A Markdown link's relative target: `[text](docs/x.md#part)` -> "docs/x.md" (placeholders such as `(...)` and
# absolute URLs are not paths).
MD_LINK = re.compile(r"\]\(([^)\s#:]+?)(?:#[^)\s]*)?\)")


def test_released_markdown_links_stay_in_the_release(edition):
    """Every relative link of a released Markdown file names a released file: a student who follows one from
    docs/grading.md or docs/nkisim.md never lands on a staff-only page left behind (docs/ray.md,
    docs/maintainers.md)."""
    _, (tree, _) = edition
    dangling = []
    for md in sorted(tree.rglob("*.md")):
        for target in MD_LINK.findall(md.read_text(encoding="utf-8")):
            if set(target) != {"."} and not (md.parent / target).exists():
                dangling.append(f"{md.relative_to(tree)} -> {target}")
    assert dangling == []


def test_staff_blocks_are_dropped_and_refuse_malformed_markers():
    text = "a\n# release: staff begin (why)\nb\n# release: staff end\nc\n"
    assert release.strip_staff_blocks(text) == "a\nc\n"
    for bad, why in (("# release: staff begin\n", "never closed"), ("# release: staff end\n", "without its begin"),
                     ("# release: staff begin\n# release: staff begin\n", "inside")):
        with pytest.raises(release.ReleaseError, match=why):
            release.strip_staff_blocks(bad, "Makefile")


def test_each_edition_ships_its_own_starters_handout_and_readme(edition):
    api, (tree, _) = edition
    for starter in ("part1/kernels.py", "part2/conv2d.py"):
        source = (tree / starter).read_text()
        assert api_of_source(source, starter) == api, starter
        expected = REPO / ("editions/legacy/" + starter if api == "legacy" else starter)
        assert source == expected.read_text(), starter
    detect_src = (tree / "nkibench" / "detect.py").read_text()
    assert f'DEFAULT_API = "{api}"\n' in detect_src
    readme = (tree / "README.md").read_text()
    sdk = {"nki": "Neuron SDK 2.30 or newer (NKI 0.4+)", "legacy": "Neuron SDK 2.29\nor older"}
    assert sdk[api] in readme and sdk["legacy" if api == "nki" else "nki"] not in readme
    handout = (tree / "handouts" / "handout.md").read_text()
    assert "<!-- api:" not in handout and "<!-- api:" not in readme
    other = "nki" if api == "legacy" else "legacy"
    staff_handout = (REPO / "handouts" / "handout.md").read_text()
    assert f"<!-- api:{api} begin" in staff_handout and f"<!-- api:{other} begin" in staff_handout
    if api == "nki":
        assert "import nki\n" in handout and "neuronxcc.nki as nki" not in handout
        assert "nki.benchmark(" not in handout and "nisa.nc_matmul(dst=" in handout
    else:
        assert "import neuronxcc.nki as nki" in handout and "\nimport nki\n" not in handout
        assert "nl.par_dim" in handout


def test_api_blocks_render_per_edition_and_refuse_malformed_markers():
    text = ("a\n<!-- api:nki begin -->\nnew\n<!-- api:nki end -->\n"
            "<!-- api:legacy begin: why -->\nold\n<!-- api:legacy end -->\nz\n")
    assert release.render_api_blocks(text, "nki") == "a\nnew\nz\n"
    assert release.render_api_blocks(text, "legacy") == "a\nold\nz\n"
    for bad, why in (("<!-- api:nki begin -->\nx\n", "never closed"),
                     ("<!-- api:nki end -->\n", "without its begin"),
                     ("<!-- api:nki begin -->\n<!-- api:legacy begin -->\n", "inside"),
                     ("<!-- api:jax begin -->\n", "unknown API")):
        with pytest.raises(release.ReleaseError, match=why):
            release.render_api_blocks(bad, "nki")
    quoted = "write `<!-- api:nki begin -->` ... `<!-- api:nki end -->` pairs\n"  # a marker quoted in text
    assert release.render_api_blocks(quoted, "legacy") == quoted
    with pytest.raises(release.ReleaseError, match="unknown API"):
        release.build(Path("/nonexistent"), api="jax")


def test_release_refuses_to_leak_marked_files(tmp_path):
    repo = tmp_path / "repo"
    (repo / "part2").mkdir(parents=True)
    (repo / "part2" / "conv2d.py").write_text(f"# {release.STAFF_MARKER}\n")
    with pytest.raises(release.ReleaseError, match="part2/conv2d.py"):
        release.build(tmp_path / "out", repo=repo)


def test_release_never_dereferences_symlinks(tmp_path):
    repo = tmp_path / "repo"
    (repo / "grader" / "reference").mkdir(parents=True)
    (repo / "grader" / "reference" / "sol.py").write_text(f"# {release.STAFF_MARKER}\n")
    (repo / "tests").mkdir()
    (repo / "tests" / "link.py").symlink_to("../grader/reference/sol.py")
    tree, _ = release.build(tmp_path / "out", repo=repo)
    assert (tree / "tests" / "link.py").is_symlink() and not (tree / "tests" / "link.py").exists()


def test_release_exclude_file_is_honoured(tmp_path):
    repo = tmp_path / "repo"
    (repo / "notes").mkdir(parents=True)
    (repo / "notes" / "answers.md").write_text("secret\n")
    (repo / "keep.txt").write_text("ok\n")
    (repo / ".release-exclude").write_text("# staff notes\nnotes/\n")
    tree, _ = release.build(tmp_path / "out", repo=repo)
    assert (tree / "keep.txt").is_file() and not (tree / "notes").exists()


def test_release_exclude_file_can_release_part_of_an_excluded_directory(tmp_path):
    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True)
    for name in ("test_staff.py", "test_setup_check.py", "conftest.py"):
        (repo / "tests" / name).write_text("pass\n")
    (repo / ".release-exclude").write_text("tests/*\n!tests/test_setup_check.py\n")
    tree, _ = release.build(tmp_path / "out", repo=repo)
    assert sorted(p.name for p in (tree / "tests").iterdir()) == ["test_setup_check.py"]
    assert release.is_excluded("grader/reference/x.py", ["grader/reference/*", "!grader/reference/x.py"])


def _release_check(tree: Path) -> subprocess.CompletedProcess:
    """The release's `make test` (its pytest run), with this interpreter instead of a fresh .venv."""
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.slow
@pytest.mark.parametrize("api", ["nki", "legacy"])
def test_release_check_passes_on_finished_and_on_broken_student_files(api, request, tmp_path):
    """A student who has done the assignment (the edition's staff solutions copied in), or whose files do not even
    parse yet, gets a passing `make test`: it checks the installation, never their kernels (`make grade` does).
    The legacy edition runs the finished case only (the broken case reads no kernel in either edition)."""
    tree, _ = request.getfixturevalue("built" if api == "nki" else "built_legacy")
    done = tmp_path / "done"
    shutil.copytree(tree, done, symlinks=True)
    shutil.copy2(SOLUTIONS[api] / "part1" / "kernels.py", done / "part1" / "kernels.py")
    shutil.copy2(SOLUTIONS[api] / "part2" / "conv2d.py", done / "part2" / "conv2d.py")
    roots = [done]
    if api == "nki":
        broken = tmp_path / "broken"
        shutil.copytree(tree, broken, symlinks=True)
        (broken / "part1" / "kernels.py").write_text("def matrix_transpose(a:\n")
        (broken / "part2" / "conv2d.py").write_text("raise SystemExit('half-written')\n")
        roots.append(broken)
    for root in roots:
        proc = _release_check(root)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
        assert " passed" in proc.stdout and "failed" not in proc.stdout


@pytest.mark.skipif(shutil.which("make") is None or shutil.which("tar") is None, reason="needs make and tar")
def test_make_submission_packs_exactly_the_two_files(tmp_path):
    for rel in ("Makefile", "part1/kernels.py", "part2/conv2d.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, tmp_path / rel)
    proc = subprocess.run(["make", "-s", "submission"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    with tarfile.open(tmp_path / "asst4.tar.gz") as tar:
        assert sorted(tar.getnames()) == ["part1/kernels.py", "part2/conv2d.py"]
        assert tar.extractfile("part2/conv2d.py").read() == (REPO / "part2" / "conv2d.py").read_bytes()


@pytest.mark.slow
def test_handout_figures_regenerate(tmp_path):
    """make handouts: every figure draws from scratch and the handout links it."""
    names = ["memory_hierarchy", "vector_add_tiling", "conv_as_matmul", "profile_timeline"]
    proc = subprocess.run(
        [sys.executable, str(REPO / "handouts" / "figures" / "make_figures.py"), *names, "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    for name in names:
        png = tmp_path / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"figures/{name}.png" in (REPO / "handouts" / "handout.md").read_text()



# A repository document named in a string of Python code (a message, a help text): `(see docs/ray.md)`.
DOC_NAMED = re.compile(r"(?<![\w/.-])((?:docs|handouts)/[\w./-]+?\.md)\b")


def _message_strings(source: str):
    """The string constants of a module that are not docstrings (f-string pieces included): what its users read."""
    tree = ast.parse(source)
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node.value


@pytest.mark.slow
def test_released_messages_name_only_released_documents(edition):
    """Every ``docs/*.md`` or ``handouts/*.md`` that a released program's strings name (an error message, a help
    text) is in the release: the Ray executor's refusal sent its reader to docs/ray.md and a graded
    ``nl.shared_constant`` path's refusal to docs/grading-security.md, both staff-only."""
    _, (tree, _) = edition
    missing = sorted({f"{py.relative_to(tree)} -> {doc}" for py in tree.rglob("*.py")
                      for text in _message_strings(py.read_text(encoding="utf-8"))
                      for doc in DOC_NAMED.findall(text) if not (tree / doc).exists()})
    assert missing == []
