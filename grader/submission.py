"""Find the two graded files in a submission (directory, asst4.tar.gz or .zip) without extracting anything.

Only ``part1/kernels.py`` and ``part2/conv2d.py`` are read (also accepted at the archive/directory root, or under
one top-level folder); every other file is ignored, archive members are read into memory with a size cap, and
links or special files are never followed.  A missing or unreadable file is the submission's problem (that
part scores 0), not a grader failure.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import tarfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from grader.rubric import SUBMISSION_FILES

MAX_FILE_BYTES = 1 << 20  # a kernel file larger than 1 MiB is not a kernel file
MAX_ARCHIVE_MEMBERS = 10_000
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".zip")


class SubmissionError(Exception):
    """The submission path does not exist or is not a directory/archive (a usage error, not a verdict)."""


@dataclass
class Submission:
    path: str
    files: dict[str, bytes]  # rubric file name (part1/kernels.py, part2/conv2d.py) -> content
    problems: dict[str, str] = field(default_factory=dict)  # rubric file name -> why it is missing/unreadable
    student: str = ""
    metadata: dict = field(default_factory=dict)

    @property
    def content_hash(self) -> str:
        """sha256 over the graded files (name + content), so renaming the archive does not change it."""
        h = hashlib.sha256()
        for name in SUBMISSION_FILES:
            h.update(name.encode() + b"\0")
            data = self.files.get(name)
            h.update(b"-" if data is None else hashlib.sha256(data).digest())
        return h.hexdigest()


def _pick(names: list[str], wanted: str) -> str | None:
    """Best archive/directory entry for a rubric file: exact path, then under one folder, then bare name."""
    wanted_p = PurePosixPath(wanted)
    exact = [n for n in names if PurePosixPath(n) == wanted_p]
    if exact:
        return exact[0]
    nested = sorted((n for n in names if PurePosixPath(n).parts[-2:] == wanted_p.parts), key=len)
    if nested:
        return nested[0]
    bare = sorted(
        (n for n in names if PurePosixPath(n).name == wanted_p.name), key=lambda n: (len(PurePosixPath(n).parts), n)
    )
    return bare[0] if bare else None


def _clean(name: str) -> str | None:
    p = PurePosixPath(name.replace("\\", "/"))
    parts = [x for x in p.parts if x not in ("", ".")]
    if not parts or any(x == ".." for x in parts) or p.is_absolute():
        return None
    if any(x.startswith("__MACOSX") for x in parts):
        return None
    return "/".join(parts)


def _from_tar(path: Path) -> tuple[dict[str, bytes], dict[str, str]]:
    files: dict[str, bytes] = {}
    problems: dict[str, str] = {}
    try:
        with tarfile.open(path, "r:*") as tar:
            members = {}
            links = []
            for i, m in enumerate(tar):
                if i >= MAX_ARCHIVE_MEMBERS:
                    break
                name = _clean(m.name)
                if name and m.isfile():
                    members[name] = m
                elif name and (m.issym() or m.islnk()):
                    links.append(name)
            for wanted in SUBMISSION_FILES:
                chosen = _pick(list(members), wanted)
                if chosen is None:
                    if (link := _pick(links, wanted)) is not None:
                        problems[wanted] = f"{link} is a link in the archive: links are not followed, {LINK_ADVICE}"
                    continue
                m = members[chosen]
                if m.size > MAX_FILE_BYTES:
                    problems[wanted] = f"{chosen} is {m.size} bytes (limit {MAX_FILE_BYTES})"
                    continue
                fh = tar.extractfile(m)
                files[wanted] = fh.read(MAX_FILE_BYTES + 1) if fh else b""
    except (tarfile.TarError, OSError, EOFError) as exc:
        problems["*"] = f"{path.name} is not a readable tar archive: {exc}"
    return files, problems


def _from_zip(path: Path) -> tuple[dict[str, bytes], dict[str, str]]:
    files: dict[str, bytes] = {}
    problems: dict[str, str] = {}
    try:
        with zipfile.ZipFile(path) as zf:
            infos = {}
            for info in zf.infolist()[:MAX_ARCHIVE_MEMBERS]:
                name = _clean(info.filename)
                if name and not info.is_dir():
                    infos[name] = info
            for wanted in SUBMISSION_FILES:
                chosen = _pick(list(infos), wanted)
                if chosen is None:
                    continue
                info = infos[chosen]
                if info.file_size > MAX_FILE_BYTES:
                    problems[wanted] = f"{chosen} is {info.file_size} bytes (limit {MAX_FILE_BYTES})"
                    continue
                with zf.open(info) as fh:
                    files[wanted] = fh.read(MAX_FILE_BYTES + 1)
    except (zipfile.BadZipFile, OSError, EOFError, RuntimeError) as exc:
        problems["*"] = f"{path.name} is not a readable zip archive: {exc}"
    return files, problems


LINK_ADVICE = "submit the file itself (make submission packs the files links point to)"


def _from_dir(root: Path) -> tuple[dict[str, bytes], dict[str, str]]:
    """Look only where a submission keeps its files (never walk a whole repository with its .venv)."""
    files: dict[str, bytes] = {}
    problems: dict[str, str] = {}
    subdirs = sorted(d for d in root.iterdir() if d.is_dir() and not d.is_symlink() and not d.name.startswith("."))
    for wanted in SUBMISSION_FILES:
        rel = PurePosixPath(wanted)
        candidates = [root / rel, *(d / rel for d in subdirs), root / rel.name]
        real_root = os.path.realpath(root)
        chosen = next(
            (
                c
                for c in candidates
                if c.is_file() and os.path.realpath(c) == os.path.join(real_root, str(c.relative_to(root)))
            ),
            None,
        )
        if chosen is None:
            linked = next((c for c in candidates if c.is_file()), None)  # only through a symbolic link
            if linked is not None:
                problems[wanted] = (f"{linked.relative_to(root)} is a symbolic link (or inside a linked directory): "
                                    f"links are not followed, {LINK_ADVICE}")
            continue
        size = chosen.stat().st_size
        if size > MAX_FILE_BYTES:
            problems[wanted] = f"{chosen.relative_to(root)} is {size} bytes (limit {MAX_FILE_BYTES})"
            continue
        files[wanted] = chosen.read_bytes()
    return files, problems


def _is_archive(p: Path) -> bool:
    return p.is_file() and p.name.lower().endswith(ARCHIVE_SUFFIXES)


def _student_from_metadata(meta: dict) -> str:
    users = meta.get("users") or meta.get(":submitters") or []
    if users and isinstance(users[0], dict):
        u = users[0]
        for key in ("email", "sid", "name", "id", ":email", ":sid", ":name"):
            if u.get(key):
                return str(u[key])
    return ""


def safe_student_id(raw: str) -> str:
    """A directory-safe student id (gradebook key, output folder name)."""
    cleaned = re.sub(r"[^A-Za-z0-9._@+-]+", "_", raw).strip("._") or "unknown"
    return cleaned[:100]


def student_from_path(path: Path) -> str:
    name = path.name
    for suffix in ARCHIVE_SUFFIXES:
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)]
            break
    if name in ("submission", "asst4") and path.parent.name:
        name = path.parent.name
    return safe_student_id(name)


def load_submission(path: str | Path, student: str | None = None) -> Submission:
    """Read the graded files of one submission (directory or archive)."""
    p = Path(path)
    if not p.exists():
        raise SubmissionError(f"submission {p} does not exist")
    meta: dict = {}
    if p.is_dir():
        meta_file = p / "submission_metadata.json"
        if not meta_file.exists():
            meta_file = p.parent / "submission_metadata.json"
        if meta_file.exists():
            try:
                meta = json.loads(meta_file.read_text()) or {}
            except (OSError, ValueError):
                meta = {}
        files, problems = _from_dir(p)
        if not files:
            archives = sorted(x for x in p.iterdir() if _is_archive(x))
            if archives:
                files, problems = _load_archive(archives[0])
    elif _is_archive(p):
        files, problems = _load_archive(p)
    else:
        raise SubmissionError(f"submission {p} is neither a directory nor a .tar.gz/.tgz/.tar/.zip archive")
    for wanted in SUBMISSION_FILES:
        if wanted in files and len(files[wanted]) > MAX_FILE_BYTES:
            del files[wanted]
            problems[wanted] = f"{wanted} is larger than {MAX_FILE_BYTES} bytes"
        elif wanted not in files and wanted not in problems:
            problems[wanted] = problems.get("*") or f"{wanted} is missing from the submission"
    ident = student or _student_from_metadata(meta) or student_from_path(p)
    return Submission(str(p), files, problems, safe_student_id(ident), meta)


def _load_archive(p: Path) -> tuple[dict[str, bytes], dict[str, str]]:
    return _from_zip(p) if p.name.lower().endswith(".zip") else _from_tar(p)


def write_tar(submission_dir: str | Path, archive: str | Path) -> None:
    """Pack a submission directory as asst4.tar.gz (part1/kernels.py + part2/conv2d.py), for tests and `make`."""
    sub = load_submission(submission_dir)
    with tarfile.open(archive, "w:gz") as tar:
        for name, data in sub.files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
