"""``GRADER_TIMELINE=FILE``: the wall-clock timeline of a grading, written as JSON for
``tools/grading_timeline.py`` (docs/grading.md, "A grading's timeline").

What a grading does when, on which of its kernel slots: input generation, the shared input files, each kernel call's
specializing child and replay (alone or as a group), the slot it held and how long it queued for it, the parent's
references, judging, trace loading and costing.  Each event is a span of the grading's monotonic clock (seconds
since the grading started) with the thread that ran it, the kernel slot that thread held (None outside a slot) and
the thread's own CPU seconds over the span (``time.thread_time``: the parent's work; a kernel process's CPU is in
its run's record, and BLAS's helper threads are not counted).

Off unless the variable is set: :func:`span` then returns one shared no-op context manager, so an instrumented
call costs a global lookup.  One grading at a time per process (``python -m grader grade``; each process of a batch
grades one submission at a time): the file holds the last grading that finished, written atomically."""

from __future__ import annotations

import json
import os
import threading
import time
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

ENV = "GRADER_TIMELINE"

_NULL: AbstractContextManager[None] = nullcontext()
_LOCAL = threading.local()


class Timeline:
    """The events of one grading (thread-safe appends)."""

    def __init__(self, path: str, **meta: Any) -> None:
        self.path = path
        self.t0 = time.monotonic()
        self.meta = {"loadavg_start": _loadavg(), **meta}
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def now(self) -> float:
        return time.monotonic() - self.t0

    def add(self, kind: str, name: str, t0: float, t1: float, cpu: float | None = None, **fields: Any) -> None:
        event = {"kind": kind, "name": name, "t0": round(t0, 4), "t1": round(t1, 4),
                 "thread": threading.current_thread().name, "slot": getattr(_LOCAL, "slot", None)}
        if cpu is not None:
            event["cpu"] = round(cpu, 4)
        event.update(fields)
        with self._lock:
            self.events.append(event)

    def write(self, **meta: Any) -> None:
        """The timeline as JSON at ``path`` (tmp + rename: a reader never sees half a file)."""
        with self._lock:
            doc = {"version": 1, "wall_s": round(self.now(), 4),
                   **self.meta, "loadavg_end": _loadavg(), **meta,
                   "events": sorted(self.events, key=lambda e: (e["t0"], e["t1"]))}
        path = Path(self.path)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(doc, indent=1) + "\n")
        os.replace(tmp, path)


_ACTIVE: Timeline | None = None


def start(**meta: Any) -> Timeline | None:
    """Begin a grading's timeline when ``GRADER_TIMELINE`` names a file (else None, and every span is a no-op)."""
    global _ACTIVE
    path = os.environ.get(ENV)
    _ACTIVE = Timeline(path, **meta) if path else None
    return _ACTIVE


def finish(timeline: Timeline | None, **meta: Any) -> None:
    """Write ``timeline`` (from :func:`start`) and stop recording."""
    global _ACTIVE
    if timeline is None:
        return
    if _ACTIVE is timeline:
        _ACTIVE = None
    timeline.write(**meta)


class _Span:
    __slots__ = ("timeline", "kind", "name", "fields", "t0", "c0")

    def __init__(self, timeline: Timeline, kind: str, name: str, fields: dict[str, Any]) -> None:
        self.timeline, self.kind, self.name, self.fields = timeline, kind, name, fields

    def __enter__(self) -> _Span:
        self.t0, self.c0 = self.timeline.now(), time.thread_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.timeline.add(self.kind, self.name, self.t0, self.timeline.now(), time.thread_time() - self.c0,
                          **self.fields)


def span(kind: str, name: str = "", **fields: Any) -> AbstractContextManager[Any]:
    """A timed span of this thread's work (a no-op unless a timeline is being recorded)."""
    timeline = _ACTIVE
    if timeline is None:
        return _NULL
    return _Span(timeline, kind, name, fields)


def active() -> bool:
    return _ACTIVE is not None


def current_slot() -> int | None:
    return getattr(_LOCAL, "slot", None)


def set_slot(slot: int | None) -> None:
    """The kernel slot this thread holds from now on (None: none); spans record it."""
    if _ACTIVE is not None or slot is None:
        _LOCAL.slot = slot


def _loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None
