"""The sandboxed child: imports ONE student file and runs ONE kernel call, nothing else.

Started by grader/sandbox.py as ``python -I -B grader/child.py`` (isolated mode: no PYTHONPATH, no user site,
no script directory on sys.path) behind prlimit/setpriv/unshare.  It is deliberately standalone: it imports the
standard library, NumPy, nkisim and (on Trainium) nkibench only -- never the grader package, the rubric or the
staff reference (its sys.path gets a directory holding nothing but links to nkisim and nkibench).

Protocol (the parent is the only one that knows where results go):
1. The parent writes one JSON job to stdin; it is read and stdin closed before any student code exists.  The
   job names the input .npy files and a randomly named output directory; both live only in local variables
   of :func:`main`.  The child joins the run's pids cgroup and applies its rlimits to itself.
2. Inputs are loaded, then (in a private mount namespace) the file system is made read-only except the work
   and output directories, and the process drops to the unprivileged uid or loses every capability.
3. Student code is executed as a module whose ``__builtins__`` lack I/O, dynamic code and introspection, and
   whose imports are limited to views of numpy, math, typing and neuronxcc.nki (no module attribute that
   leads to os/sys, no NumPy file I/O).  The static screen (nkisim.check_kernel) ran before all this.
   With ``mode = "import"`` (the import check) the child stops here and reports which functions are missing.
4. The kernel runs through nkisim's runtime, or on Trainium (``backend = neuron``) through nkibench, the timing
   layer the course scripts use: nki.baremetal / nki.benchmark for ``neuronxcc.nki`` kernels, nki.jit's NEFF
   timed by the Neuron runtime (nrtpy) for ``import nki`` kernels (job ``api``: the file's API).
   With ``want_stream`` (nkisim, either API) the kernel is only specialized: its Python runs once in timing mode
   and the program it made is written as ``stream.json`` (nkisim.stream), no outputs and no trace.
5. Outputs are written as .npy, the trace with nkisim.core.traceio, then a small status.json -- each file via
   tmp + os.replace.  Nothing printed counts; the parent judges the arrays itself and costs the trace itself.

The same script, started with ``stream_file`` instead of a kernel to run, is the parent's re-execution of such a
stream: it loads no student module, runs the stream with nkisim on the inputs the parent gave it, in the same
sandbox (CPU, memory and time limits: a stream may be huge or loop forever), and writes outputs and trace as in 5.
With ``group`` it executes several such streams, each on its own inputs, in one lockstep group (correctness cases
sharing X and W: nkisim.stream.replay_group) and writes each member's files into a directory of its own.
"""

from __future__ import annotations

import builtins
import functools
import gc
import json
import os
import sys
import time
import traceback
import types

# Student code may import numpy, math, typing and the NKI namespaces' modules (the static screen's list too),
# and gets them as views without module attributes that lead elsewhere: see _module_allowed and _view.
# Builtins withheld from student code (I/O, dynamic code, introspection, interpreter control).
WITHHELD_BUILTINS = frozenset(
    {
        "open",
        "eval",
        "exec",
        "compile",
        "input",
        "breakpoint",
        "help",
        "exit",
        "quit",
        "globals",
        "locals",
        "vars",
        "dir",
        "getattr",
        "setattr",
        "delattr",
        "memoryview",
        "copyright",
        "credits",
        "license",
    }
)
# NumPy names withheld from student code: file I/O, pickling, raw memory, and the packages that expose them.
NUMPY_WITHHELD = frozenset(
    {
        "load",
        "save",
        "savez",
        "savez_compressed",
        "loadtxt",
        "savetxt",
        "genfromtxt",
        "fromfile",
        "fromregex",
        "memmap",
        "DataSource",
        "lib",
        "ctypeslib",
        "core",
        "testing",
        "f2py",
        "distutils",
        "ma",
        "rec",
        "char",
        "strings",
        "show_config",
        "show_runtime",
        "info",
        "source",
        "who",
        "matlib",
        # NumPy's floating-point error state: nkisim computes instruction values with NumPy, so a kernel raising or
        # calling back on its errors would see device values (errstate(all="raise") around an instruction)
        "seterr",
        "seterrcall",
        "errstate",
        # NumPy's datetime API: its parser reads the wall clock ('now', 'today'); see _stop_numpy_clock
        "datetime64",
        "timedelta64",
        "datetime_as_string",
        "datetime_data",
        "busday_count",
        "busday_offset",
        "is_busday",
        "busdaycalendar",
        "DateTime64DType",
        "TimeDelta64DType",
    }
)
NUMPY_SUBMODULES = frozenset({"linalg", "fft", "polynomial", "emath", "dtypes", "exceptions", "random", "typing"})
MAX_MESSAGE = 20_000
_views: dict[str, types.ModuleType] = {}


@functools.cache
def _frontends():
    """nkisim's front-end registry (the NKI namespaces; pure data), importable once main() has set sys.path."""
    from nkisim import frontends

    return frontends


def _module_allowed(name: str) -> bool:
    """Modules student code may reach, by import or as an attribute of another allowed module."""
    parts = name.split(".")
    if parts[0] in ("math", "typing", "__future__"):
        return True
    fes = _frontends()
    if any(parts[0] == fe.root for fe in fes.FRONT_ENDS) or fes.of_module(name) is not None:  # NKI, or nkisim's
        return True
    return parts[0] == "numpy" and (len(parts) == 1 or (len(parts) == 2 and parts[1] in NUMPY_SUBMODULES))


def _view(real: types.ModuleType) -> types.ModuleType:
    """A stand-in module that forwards public attributes of ``real`` but hides private names, withheld NumPy
    functions and every module attribute that is not itself allowed (``nl.os``, ``typing.sys``, ``np.lib``)."""
    cached = _views.get(real.__name__)
    if cached is not None:
        return cached
    view = types.ModuleType(real.__name__, getattr(real, "__doc__", None))
    is_numpy = real.__name__.split(".")[0] == "numpy"  # numpy and its allowed submodules (numpy.dtypes)

    def __getattr__(name: str):
        if name.startswith("_") or (is_numpy and name in NUMPY_WITHHELD):
            raise AttributeError(f"module {real.__name__!r} has no attribute {name!r} in graded kernels")
        try:
            value = getattr(real, name)
        except AttributeError as exc:
            missing = str(exc)  # raised below, outside this handler: no __context__ to walk back to the error
        else:
            missing = None
        if missing is not None:
            # A failed lookup's AttributeError carries the object it failed on (``err.obj``, Python 3.10+): from
            # getattr(real, ...) that is the real module (real typing holds operator, sys, ...), so the view
            # raises its own, naming itself.
            raise AttributeError(missing, name=name, obj=view)
        if isinstance(value, types.ModuleType):
            if not _module_allowed(value.__name__):
                raise AttributeError(f"module {real.__name__!r} has no attribute {name!r} in graded kernels")
            return _view(value)
        # A module's containers are process-wide state (np.sctypeDict, np.typecodes, typing.EXCLUDED_ATTRIBUTES):
        # handed out read-only, so no spelling the screen misses (an alias rebound to one, a parameter, a list of
        # them) can change them for nkisim or the grader (the screen's SANDBOX-MONKEYPATCH is the first layer)
        if type(value) is dict:
            return types.MappingProxyType(value)
        if type(value) is list:
            return tuple(value)
        if type(value) is set:
            return frozenset(value)
        return value

    view.__getattr__ = __getattr__  # PEP 562: consulted for every name not in the view's own dict
    if hasattr(real, "__path__"):
        view.__path__ = []
    _views[real.__name__] = view
    return view


def _restricted_import(name, globals=None, locals=None, fromlist=(), level=0):  # noqa: A002 - builtins API
    """__import__ for student code: only allowed modules, and only as views (see :func:`_view`)."""
    if level != 0:
        raise ImportError("relative imports are not allowed in graded kernels")
    if not _module_allowed(name):
        raise ImportError(
            f"import of {name!r} is not allowed in graded kernels (allowed: numpy, math, typing, "
            f"{', '.join(fe.namespace for fe in _frontends().FRONT_ENDS)})"
        )
    module = builtins.__import__(name, globals, locals, fromlist, level)
    return _view(module)


def _student_builtins() -> dict:
    safe = {k: v for k, v in vars(builtins).items() if k not in WITHHELD_BUILTINS}
    safe["__import__"] = _restricted_import
    return safe


# --------------------------------------------------------------------------------------- OS-level jail ----
# Used when the parent started us as (namespace) root in a private mount namespace: every mount becomes
# read-only except the work and output directories, then all capabilities are dropped (so nothing can be
# remounted) or the process switches to an unprivileged uid.  Linux ABI constants from <sys/mount.h>,
# <linux/prctl.h> and <linux/capability.h>.
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME, MS_STRICTATIME = 1024, 2048, 1 << 21, 1 << 24
PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 4, 24, 38
_CAP_V3 = 0x20080522
_MOUNT_FLAGS = {
    "ro": MS_RDONLY,  # the mount's own read-only flag (mountinfo's per-mount options, field 6)
    "nosuid": MS_NOSUID,
    "nodev": MS_NODEV,
    "noexec": MS_NOEXEC,
    "noatime": MS_NOATIME,
    "nodiratime": MS_NODIRATIME,
    "relatime": MS_RELATIME,
}


def _unescape(path: str) -> str:
    return path.encode().decode("unicode_escape").encode("latin-1").decode("utf-8", "replace")


def _mounts() -> list[tuple[str, int]]:
    out = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            fields = line.split()
            point, opts = _unescape(fields[4]), fields[5].split(",")
            flags = 0
            for o in opts:
                flags |= _MOUNT_FLAGS.get(o, 0)
            out.append((point, flags))
    return out


def _jail(writable: list[str], masked: list[str], running: list[str] | tuple[str, ...] = ()) -> list[str]:
    """Make the file system read-only except ``writable`` and hide ``masked`` directories (the grader package,
    the rubric, the staff reference) under empty read-only tmpfs mounts; returns the features in effect.
    ``running``: the directories of the calls a warm server was running when it forked this one (their paths are
    in this process's memory), hidden the same way; one that has gone meanwhile needs no mask."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
    features = []
    if libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        return features
    for w in writable:
        libc.mount(w.encode(), w.encode(), None, MS_BIND | MS_REC, None)
    hidden = 0
    flags = MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC
    for m in masked:
        if os.path.isdir(m):
            hidden += libc.mount(b"tmpfs", m.encode(), b"tmpfs", flags, b"size=4k,mode=0555") == 0
    exposed = 0
    for m in running:
        if os.path.isdir(m) and libc.mount(b"tmpfs", m.encode(), b"tmpfs", flags, b"size=4k,mode=0555") != 0:
            exposed += os.path.isdir(m)  # (a call that ended meanwhile took its directory with it)
    if masked and hidden == len([m for m in masked if os.path.isdir(m)]) and not exposed:
        features.append("grader-files-hidden")
    keep = set(writable)
    failed = 0
    for point, flags in sorted(_mounts(), key=lambda m: -len(m[0])):
        # a mount read-only already (the masks above: one per private directory the grader knows, dozens on a
        # machine that has run many batches; /sys where the container made it so) is left as it is: remounting
        # it read-only again changes nothing.  Stacked mounts: a path's remount reaches its top mount, so a
        # read-only top is skipped and a writable top is remounted, whichever entry comes first.
        if point in keep or flags & MS_RDONLY:
            continue
        if libc.mount(None, point.encode(), None, MS_REMOUNT | MS_BIND | MS_RDONLY | flags, None) != 0:
            failed += 1
    probe = os.path.join(os.path.dirname(writable[0]), ".jail-probe")
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT, 0o600)
        os.close(fd)
        os.unlink(probe)
    except OSError:
        features.append("read-only-fs")
    return features


def _drop_privileges(uid: int | None, gid: int | None) -> list[str]:
    """Switch to ``uid`` if given, else drop every capability (stay uid 0 of the namespace, powerless)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    features = []
    if uid is not None:
        os.setgroups([])
        os.setgid(gid if gid is not None else uid)
        os.setuid(uid)
        features.append(f"uid:{uid}")
    else:
        for cap in range(64):
            libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)

        class Header(ctypes.Structure):
            _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

        class Data(ctypes.Structure):
            _fields_ = [
                ("effective", ctypes.c_uint32),
                ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32),
            ]

        data = (Data * 2)()
        if libc.capset(ctypes.byref(Header(_CAP_V3, 0)), data) == 0:
            features.append("no-capabilities")
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0:
        features.append("no-new-privs")
    return features


def _undumpable() -> list[str]:
    """PR_SET_DUMPABLE 0: no process without CAP_SYS_PTRACE may open this one's /proc/<pid>/{root,cwd,fd,mem,
    environ}.  Without it, a kernel that escaped the Python restrictions in one sandboxed child could reach a
    sibling child (another submission graded at the same time, same uid, no capabilities either) through
    /proc/<sibling>/root and write into that child's output directory (proc(5): ptrace access mode checking)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    return ["undumpable"] if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0 else []


# --------------------------------------------------------------------------------------- no wall clock ----
# The one clock student code can reach is NumPy's: its datetime parser reads C time() for 'now' and 'today'
# (np.datetime64('now'), np.array(['now']).astype('M8[s]'), a dtype spelt at run time from any string).  A kernel
# must not read the wall clock: the time the emulator takes to execute its instructions depends on the device
# values (a data-dependent nl.while_loop iterates as often as a register says) and on the run's mode (values
# computed or not), so a clock in the kernel's Python is a side channel of both (docs/grading-security.md, S8).  The
# screen refuses the spellings it can see (SANDBOX-CLOCK) and the NumPy view withholds the datetime API's names;
# this is the layer under both: NumPy's own imports of time() and localtime_r() are pointed at a clock stopped at
# the epoch, before any student code exists.  nkisim and the grader read clocks through Python's time module
# (the interpreter's own imports), which this does not touch.
_CLOCK_SYMBOLS = frozenset({"time", "gettimeofday", "clock_gettime"})
_STOPPED_CLOCKS: list = []  # the ctypes callbacks: alive as long as the process


def _elf_import_slots(path: str, wanted: frozenset) -> tuple[dict[str, list[int]], int]:
    """The GOT slots (offsets from the load base) through which the ELF64 shared object ``path`` calls the
    functions ``wanted``, from its .rela sections, and its machine (EM_*).

    The file is mapped, not read: NumPy's ``_multiarray_umath`` is about 10 MB, of which the headers, relocations
    and symbol tables read here are a few hundred KB.  A ``read()`` of the whole file into a fresh buffer cost every
    kernel process 10 MB of first-touch page faults and a copy (perf: the read() site of the kernel
    processes' page faults; docs/grading.md, round 10).  The answer depends on the file alone, so a process keeps
    it (:func:`_clock_slots`)."""
    import mmap
    import struct

    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
        if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
            raise ValueError("not a little-endian ELF64 object")
        machine = struct.unpack_from("<H", data, 0x12)[0]
        shoff = struct.unpack_from("<Q", data, 0x28)[0]
        shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
        sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
        slots: dict[str, list[int]] = {}
        for _name, kind, _flags, _addr, off, size, link, _info, _align, entsize in sections:
            if kind != 4 or not entsize:  # SHT_RELA
                continue
            symtab = sections[link]
            strtab = sections[symtab[6]]
            names: dict[int, str] = {}  # symbol index -> name, each looked up once
            for k in range(size // entsize):
                r_offset, r_info, _ = struct.unpack_from("<QQq", data, off + k * entsize)
                sym = r_info >> 32
                if not sym:
                    continue
                name = names.get(sym)
                if name is None:
                    st_name = struct.unpack_from("<I", data, symtab[4] + sym * symtab[9])[0]
                    start = strtab[4] + st_name
                    end = data.find(b"\0", start)
                    if end < 0:
                        raise ValueError("a symbol name runs past the end of the file")
                    name = names[sym] = data[start:end].decode("ascii", "replace")
                if name in wanted:
                    slots.setdefault(name, []).append(r_offset)
    return slots, machine


_SLOTS_SEEN: dict[tuple, tuple[dict[str, list[int]], int]] = {}


def _clock_slots(path: str) -> tuple[dict[str, list[int]], int]:
    """:func:`_elf_import_slots` of ``path`` for the clock functions, kept per file (its device, inode, size and
    modification time): the warm kernel server (grader/forkserver.py) finds them once before it forks, so no call
    parses NumPy's library again; a one-off child finds them itself."""
    st = os.stat(path)
    key = (path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    hit = _SLOTS_SEEN.get(key)
    if hit is None:
        hit = _SLOTS_SEEN[key] = _elf_import_slots(path, _CLOCK_SYMBOLS)
    return {name: list(offs) for name, offs in hit[0].items()}, hit[1]


def _numpy_umath_path() -> str:
    import numpy._core._multiarray_umath as umath  # noqa: PLC2701 - the module whose imports are patched

    return os.path.realpath(umath.__file__)


def _stop_numpy_clock() -> list[str]:
    """Point NumPy's imports of the clock functions at ones that answer the epoch (see above); returns the jail
    feature it adds (nothing when it could not: another platform, a NumPy without the imports)."""
    import ctypes

    path = _numpy_umath_path()
    try:
        slots, _machine = _clock_slots(path)
        with open("/proc/self/maps") as fh:
            maps = [line.split() for line in fh]
        regions = [(int(lo, 16), int(hi, 16), perms, off) for (lo, hi), perms, off in
                   ((f[0].split("-"), f[1], f[2]) for f in maps if len(f) >= 6 and f[5] == path)]
    except (OSError, ValueError, IndexError):
        return []
    starts = [lo for lo, _, _, off in regions if int(off, 16) == 0]
    if not starts or not slots:
        return []
    base = min(starts)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    page = os.sysconf("SC_PAGE_SIZE")

    def epoch_time(tloc):
        if tloc:
            ctypes.c_long.from_address(tloc).value = 0
        return 0

    def epoch_timeval(tv, _tz):
        if tv:
            ctypes.memset(tv, 0, 2 * ctypes.sizeof(ctypes.c_long))
        return 0

    def epoch_clock(_clock, ts):
        if ts:
            ctypes.memset(ts, 0, 2 * ctypes.sizeof(ctypes.c_long))
        return 0

    stopped = {
        "time": ctypes.CFUNCTYPE(ctypes.c_long, ctypes.c_void_p)(epoch_time),
        "gettimeofday": ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)(epoch_timeval),
        "clock_gettime": ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_void_p)(epoch_clock),
    }
    _STOPPED_CLOCKS.append(stopped)
    for name, offsets in slots.items():
        target = ctypes.cast(stopped[name], ctypes.c_void_p).value
        for off in offsets:
            addr = base + off
            perms = next((p for lo, hi, p, _ in regions if lo <= addr < hi), None)
            if perms is None:
                return []
            start = addr - addr % page
            # the slot may sit in RELRO (read-only after relocation): writable for the write, then as it was
            was = (1 if "r" in perms else 0) | (2 if "w" in perms else 0)
            if "w" not in perms and libc.mprotect(start, page, 3) != 0:  # PROT_READ | PROT_WRITE
                return []
            ctypes.c_void_p.from_address(addr).value = target
            if "w" not in perms:
                libc.mprotect(start, page, was)
    return ["numpy-clock-stopped"]


def _confine(job: dict) -> None:
    """Join the run's pids cgroup, lower this process's priority when the grading asks (``nice``: a call off the
    grading's critical path, grader/runner.py ``background``) and apply its rlimits (before any student code
    exists)."""
    import resource

    nice = job.get("nice")
    if type(nice) is int and 0 < nice < 20:
        try:
            os.nice(nice)
        except OSError:
            pass
        # a kernel process is the first of a session of its own, and where the scheduler groups processes by
        # session (Linux autogroup), CPU is shared between sessions by the session's own nice value: set it too
        try:
            with open("/proc/self/autogroup", "w") as fh:
                fh.write(str(nice))
        except OSError:
            pass
    if job.get("cgroup"):
        try:
            with open(job["cgroup"], "w") as fh:
                fh.write(str(os.getpid()))
        except OSError:
            pass
    for name, (soft, hard) in (job.get("rlimits") or {}).items():
        which = getattr(resource, name, None)
        if which is None:
            continue
        try:
            cur_soft, cur_hard = resource.getrlimit(which)
            hard = min(hard, cur_hard) if cur_hard != resource.RLIM_INFINITY else hard
            resource.setrlimit(which, (min(soft, hard), hard))
        except (ValueError, OSError):
            pass


def _atomic_write_bytes(path: str, data: bytes) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


def _load_student_module(path: str, module_name: str) -> types.ModuleType:
    with open(path, "rb") as fh:
        source = fh.read()
    code = compile(source, path, "exec", dont_inherit=True)
    module = types.ModuleType(module_name)
    module.__file__ = path
    module.__dict__["__builtins__"] = _student_builtins()
    # Registered so that nkisim (like the real NKI front end) can find the kernel's module and source.
    sys.modules[module_name] = module
    exec(code, module.__dict__)  # noqa: S102 - this is the sandboxed child; the source passed the static screen
    return module


def _ensure_nki_importable(backend: str, api: str | None) -> None:
    """Make the namespace of the file's API (``nki`` / ``neuronxcc.nki``; the legacy one when the job names none)
    resolve: to nkisim unless the real toolchain is requested and present."""
    import importlib

    namespace = _frontends().get(api or "legacy").namespace
    try:
        importlib.import_module(namespace)
        return
    except ImportError:
        if backend == "neuron":
            raise
    from nkisim import _hook

    if _hook.install() is None:
        raise ImportError(f"{namespace} is not importable and the nkisim import fallback is disabled")
    importlib.import_module(namespace)


def _run_nkisim(kernel, args, kwargs, mode: str, target: str):
    from nkisim.core.runtime import run_kernel

    # graded=True: a grading run, so nkisim refuses what reads the grading machine (nl.shared_constant of a file
    # path: docs/grading-security.md C7); outside the grader nkisim reads such files as AWS's compiler does
    run = run_kernel(kernel, args, kwargs, mode=mode, target=target, graded=True)
    return run.outputs, run.trace


# The largest instruction stream either side handles (the staff conv's largest case writes ~10 MB).
MAX_STREAM_BYTES = 256 << 20


def _stand_ins(specs: list) -> list:
    """Zero-filled arrays of the call's input shapes and dtypes, for a specializing run: it computes no values, so
    the real inputs are never in this process (a kernel past the screen walking frames found them here:
    docs/grading-security.md L3).  ``np.zeros`` maps fresh zero pages; a timing run never touches them."""
    import numpy as np

    out = []
    for shape, spec in specs:
        try:
            dtype = np.dtype(spec)
        except TypeError:
            import ml_dtypes

            dtype = np.dtype(getattr(ml_dtypes, spec))
        out.append(np.zeros(tuple(int(n) for n in shape), dtype=dtype))
    return out


def _specialize(kernel, args, kwargs, target: str, out_dir: str) -> tuple:
    """Run the kernel's Python once, computing no values (timing mode), and write the program it made as
    ``stream.json`` (nkisim.stream): the parent executes that program itself (docs/grading-security.md, item 5).

    Returns the recorder and the run for the caller to hold until the process ends (``run_job``'s ``os._exit``):
    freeing them -- the recorder keeps every event, handle and view of the run, the run its trace -- took 30-48 ms
    of CPU after a batch-4 224x224 recording (0.5 s), before the status was written and the parent could go on;
    ``os._exit`` hands the memory back without visiting the objects (docs/grading.md, "round 12, spec2")."""
    from nkisim import stream
    from nkisim.core.runtime import run_kernel

    rec = stream.Recorder()
    # graded=True as in _run_nkisim: the specialization serves a score (rule C7 refuses nl.shared_constant paths)
    run = run_kernel(kernel, args, kwargs, mode="timing", target=target, stream=rec, graded=True)
    _atomic_write_bytes(os.path.join(out_dir, "stream.json"), stream.dumps(rec.data()))
    return rec, run


def _of_api(shipped: dict, api: str | None) -> dict:
    """The stream, when its front end is the API of the file the parent graded (the parent times each API against
    its own staff kernels and the front ends keep different rules): a child that ships a program of the other API
    forged it (docs/grading-security.md L5)."""
    from nkisim import stream

    want = api or "legacy"
    got = shipped.get("frontend")
    if got != want:
        raise stream.StreamError(f"header: front end {got!r:.40}, but the graded file uses the {want!r} API")
    return shipped


def _replay(path: str, args, kwargs, mode: str, target: str, api: str | None = None, hbm_dir: str | None = None,
            keep: list | None = None):
    """Execute the instruction stream at ``path`` (shipped by a specializing child) with nkisim on this process's
    inputs.  No student code exists in this process: the stream is data, read by nkisim.stream.  ``hbm_dir``: where
    the run's HBM tensors live as files (the output directory: ``_write_results`` renames an output's file).
    ``keep``: gets the decoded stream and the run, for the caller to hold until ``os._exit`` (as ``_specialize``'s
    recording: freeing a batch-4 224x224 stream's ~26 MB of Python objects one at a time comes before the status)."""
    from nkisim import stream

    with open(path, "rb") as fh:
        data = fh.read(MAX_STREAM_BYTES + 1)
    if len(data) > MAX_STREAM_BYTES:
        raise stream.StreamError(f"the instruction stream is over {MAX_STREAM_BYTES >> 20} MiB")
    decoded = _of_api(stream.loads(data), api)
    run = stream.replay(decoded, args, kwargs, mode=mode, target=target, graded=True, hbm_dir=hbm_dir)
    if keep is not None:
        keep.append((decoded, run))
    return run.outputs, run.trace


def _load_input(path: str, mapped: bool = False):
    """One input array (no pickles).  ``mapped``, for the parent's replays, which run no student code: a
    copy-on-write map of the file instead of a copy in this process's memory -- nkisim copies every argument into
    its own HBM anyway, so the 205 MB X of a 224x224 batch-4 call was copied twice (and faulted in twice)."""
    import numpy as np

    if mapped:
        return np.asarray(np.load(path, allow_pickle=False, mmap_mode="c"))
    return np.load(path, allow_pickle=False)


def _load_group(members: list) -> list:
    """The members of a group replay job, ``[(stream file, args, kwargs, output directory)]``, their inputs loaded
    (before the jail, as a single call's are); a file several members name is loaded once, so they share X and W."""
    loaded: dict = {}
    out = []
    for m in members:
        args = []
        for p in m["inputs"]:
            if p not in loaded:
                loaded[p] = _load_input(p, mapped=True)
            args.append(loaded[p])
        out.append((m["stream_file"], args, dict(m["kwargs"]), m["out_dir"]))
    return out


def _open_channel(spec: object):
    """This group's side of the channel named by the job (``{"path", "role"}``), or None."""
    if not isinstance(spec, dict) or not isinstance(spec.get("path"), str) or spec.get("role") not in (
            "producer", "consumer"):
        return None
    from nkisim.core import channel

    return channel.open_channel(spec["path"], spec["role"])


def _replay_group(group: list, job: dict, out_dir: str, link=None, keep: list | None = None) -> dict:
    """Execute the members' streams (shipped by the specializing children) in one lockstep group
    (nkisim.stream.replay_group: products of bit-identical operands are computed once) and write each member's
    outputs, trace and status.json into its own directory, as a single replay writes them: a member's error is its
    own.  Returns the group's figures for the parent (reused and computed products).  ``keep``: gets the decoded streams
    and the members' tuples, for the caller to hold until ``os._exit`` (see ``_replay``); each member's run is still
    dropped once written (its outputs' memory)."""
    from nkisim import stream

    traceio = None
    if job.get("want_trace"):
        import nkisim.core.traceio as traceio
    members, errors = [], {}
    # A stream that several members ship byte for byte (part2.large and part2.bias record the same program) is
    # decoded once and read by each member's replayer (nkisim.stream._Replayer only reads its stream): a batch-4
    # 224x224 stream is ~26 MB of Python objects, fresh heap pages the group's process touches before its members
    # start.  Keyed by the bytes themselves, so only an identical stream is shared.
    decoded: dict[bytes, dict] = {}
    if keep is not None:
        keep.append(decoded)
    for k, (path, args, kwargs, _) in enumerate(group):
        try:
            with open(path, "rb") as fh:
                data = fh.read(MAX_STREAM_BYTES + 1)
            if len(data) > MAX_STREAM_BYTES:
                raise stream.StreamError(f"the instruction stream is over {MAX_STREAM_BYTES >> 20} MiB")
            s = decoded.get(data)
            if s is None:
                s = decoded[data] = _of_api(stream.loads(data), job.get("api"))
            members.append((s, args, kwargs))
        except Exception as exc:  # noqa: BLE001 - this member's error, as its own replay would report it
            errors[k] = exc
            members.append(({}, args, kwargs))
    del decoded
    # each member's HBM tensors live in files of its own directory: an output is renamed there, not copied
    for _, _, _, mdir in group:
        os.makedirs(mdir, exist_ok=True)
    live = [k for k in range(len(group)) if k not in errors]

    def write(k: int, got: object, cpu: float, borrowed: float) -> None:
        """Member ``k``'s outputs, trace and status.json (the last file written for it, by tmp + rename: the
        grader reads a member once its status exists, and the member's directory is never written again)."""
        mdir = group[k][3]
        os.makedirs(mdir, exist_ok=True)
        mstatus: dict = {"ok": False, "stage": "kernel"}
        mstatus["cpu_seconds"] = mstatus["kernel_seconds"] = cpu
        mstatus["borrowed_seconds"] = borrowed  # its siblings' CPU for the products it reused (runner's time guard)
        try:
            if isinstance(got, BaseException):
                raise got
            _write_results(mstatus, job, mdir, got.outputs, got.trace, None, traceio)
        except BaseException as exc:  # noqa: BLE001 - the member's error
            mstatus["error_type"] = type(exc).__name__
            mstatus["error"] = str(exc)[:MAX_MESSAGE]
            mstatus["traceback"] = "".join(traceback.format_exception(exc))[-MAX_MESSAGE:]
        _atomic_write_bytes(os.path.join(mdir, "status.json"), json.dumps(mstatus).encode("utf-8"))

    # Each member's files are written as soon as its replay ends, in its own turn (replay_group's ``finished``): the
    # batch-1 timed calls end about a quarter of the way through the 224x224 group, and the grader judges and costs
    # them while the batch-4 calls still run instead of after the group's process (docs/grading.md, round 12,
    # tail).  The run is dropped once written (the collector is off: nothing else frees it before the exit): its
    # outputs' memory (205 MB for a batch-4 224x224 call) is returned before the next member's files take as much
    # page cache.
    written: set[int] = set()

    def finished(i: int, got: object, cpu: float, borrowed: float) -> None:
        written.add(live[i])
        write(live[i], got, cpu, borrowed)

    runs, figures = stream.replay_group([members[k] for k in live], mode=job["mode"], target=job["target"],
                                        graded=True, hbm_dirs=[group[k][3] for k in live], link=link,
                                        finished=finished)
    # the members whose replay raised what is not an Exception, and those whose stream could not be read
    for i, k in enumerate(live):
        if k not in written:
            write(k, runs[i], figures["cpu_seconds"][i], figures["borrowed_seconds"][i])
        runs[i] = None
    for k in errors:
        write(k, errors[k], 0.0, 0.0)
    return {"hits": figures["hits"], "misses": figures["misses"],
            **({"channel_wait": figures["channel_wait"]} if "channel_wait" in figures else {})}


# The course harness's timing counts (part2/test_harness.py: warmup 5, 20 timed iterations; p99 in microseconds).
HARDWARE_WARMUP = 5
HARDWARE_ITERATIONS = 20


def _run_neuron(kernel, args, kwargs, mode: str, want_latency: bool, api: str | None = None):
    """Real hardware through nkibench (the course scripts' timing layer): outputs from one launch, latency from a
    timed measurement.  ``api`` (the file's, as the parent detected it) picks the backend: ``neuron-legacy``
    (nki.baremetal / nki.benchmark) or ``neuron-nki`` (nki.jit keeping the NEFF, timed by nrtpy).  Returns
    (outputs, p99 us, {"backend": ..., "versions": {...}}); anything missing raises nkibench's errors, which
    name the step (no latency is ever made up).  Tested with nkibench's fakes (tests/fixtures/nkibench)."""
    import nkibench

    backend = nkibench.backend_for(kernel, api=api)
    outputs = backend.launch(kernel, tuple(args), kwargs) if mode == "full" else None
    latency = None
    if want_latency:
        m = backend.measure(kernel, tuple(args), kwargs, warmup=HARDWARE_WARMUP, iterations=HARDWARE_ITERATIONS)
        latency = float(m.timing.p99_us)
    return outputs, latency, {"backend": backend.name, "versions": dict(backend.versions())}


def _write_results(status: dict, job: dict, out_dir: str, outputs, trace, latency, traceio) -> None:
    """Outputs as .npy, the trace (when asked for) and the hardware latency, each file via tmp + os.replace."""
    import numpy as np

    status["stage"] = "output"
    if outputs is not None:
        outs = outputs if isinstance(outputs, tuple | list) else (outputs,)
        status["n_outputs"] = len(outs)
        renamed: set = set()
        for i, arr in enumerate(outs):
            arr = np.asarray(arr)
            if arr.dtype == object:
                raise TypeError(f"kernel output {i} is not a numeric array")
            held = _hbm_file(arr)
            if held is not None and held not in renamed \
                    and os.path.abspath(os.path.dirname(held)) == os.path.abspath(out_dir):
                # a replay's output whose storage is the data of a .npy file in this directory, written as the
                # kernel ran (nkisim run_kernel(hbm_dir=)): the same bytes np.save would write, renamed
                renamed.add(held)
                os.replace(held, os.path.join(out_dir, f"output_{i}.npy"))
                continue
            tmp = os.path.join(out_dir, f"output_{i}.tmp.npy")
            np.save(tmp, arr, allow_pickle=False)
            os.replace(tmp, os.path.join(out_dir, f"output_{i}.npy"))
    if trace is not None and job.get("want_trace"):
        tmp = os.path.join(out_dir, "trace.tmp")
        traceio.dump(trace, tmp)
        os.replace(tmp, os.path.join(out_dir, "trace.bin"))
    if latency is not None:
        status["hardware_p99_us"] = latency
    status["ok"] = True
    status["stage"] = "done"


def _hbm_file(arr) -> str | None:
    """The file a replay's output array is the whole data of (``nkisim.core.buffers.hbm_file``), if any."""
    buffers = sys.modules.get("nkisim.core.buffers")
    return buffers.hbm_file(arr) if buffers is not None else None


class _Done(Exception):  # noqa: N818 - control flow, never an error
    """Raised to leave the job early once its work is done (the import check)."""


def main() -> int:
    job = json.loads(sys.stdin.buffer.read(1 << 20).decode("utf-8"))
    sys.stdin.close()
    return run_job(job)


def run_job(job: dict) -> int:
    """Steps 1-5 of the module docstring for one job; ends the process (``os._exit``), never returns."""
    _confine(job)
    if job.get("stream_file") or job.get("group"):
        # A replay (no student code, nkisim's own objects only) runs without the cyclic collector: decoding the
        # five streams of the 224x224 group makes ~750,000 containers (JSON lists and dicts, no cycles), and the
        # collections their allocations set off walk them again and again: 0.40 -> 0.11 CPU s for those streams in
        # a fork of the warm server, 1.2 -> 0.12 in the group's process of a grading (load 4-7).  The kernel's run
        # disables the collector anyway (run_kernel, replay_group), and the process ends by os._exit.
        gc.disable()
    sys.path[:0] = [p for p in job.get("sys_path", []) if isinstance(p, str)]
    out_dir = job["out_dir"]
    status: dict = {"ok": False, "stage": "setup"}
    # what the kernel's run made -- a recording, decoded streams, runs -- held until os._exit, which hands the memory
    # back without visiting the objects (freeing them one at a time came before the status: round 12, spec2)
    kept: list = []
    started = time.perf_counter()
    try:
        import numpy  # noqa: F401 - imported before any student code exists

        status["jail"] = _stop_numpy_clock()  # before any student code exists

        _ensure_nki_importable(job["backend"], job.get("api"))
        traceio = None
        if job["backend"] == "nkisim":
            import nkisim.core.runtime  # noqa: F401 - imported before student code, never by it

            if job.get("want_trace"):
                import nkisim.core.traceio as traceio
            if job.get("want_stream") or job.get("stream_file") or job.get("group"):
                import nkisim.stream  # noqa: F401 - imported before student code, never by it
        args = (_stand_ins(job["input_specs"]) if job.get("want_stream")
                else [_load_input(p, mapped=bool(job.get("stream_file"))) for p in job["inputs"]])
        group = _load_group(job["group"]) if job.get("group") else None
        # a group sharing products with the grading's other half (nkisim.core.channel): the file the grader made for
        # the two is mapped now, before the file system turns read-only and the privileges go
        link = _open_channel(job.get("channel")) if group is not None else None
        kwargs = dict(job["kwargs"])
        if job.get("jail"):
            status["jail"] += _jail([job["work_dir"], out_dir], [m for m in job.get("mask", []) if isinstance(m, str)],
                                    [m for m in job.get("mask_calls", []) if isinstance(m, str)])
            status["jail"] += _drop_privileges(job.get("uid"), job.get("gid"))
        os.chdir(job["work_dir"])
        # a fork of grader/forkserver.py names the namespaces it set up for this call itself
        status["jail"] = status.get("jail", []) + [str(f) for f in job.get("server_features", ())] + _undumpable()

        if group is not None:
            # the parent's re-execution of several specialized calls on the same inputs, in lockstep (one process)
            status["stage"] = "kernel"
            t0 = time.perf_counter()
            status["group"] = _replay_group(group, job, out_dir, link, kept)
            status["kernel_seconds"] = time.perf_counter() - t0
            status["ok"] = True
            status["stage"] = "done"
            raise _Done
        if job.get("stream_file"):
            # the parent's re-execution of a specialized kernel: nkisim runs the stream; no student code is loaded
            status["stage"] = "kernel"
            t0 = time.perf_counter()
            outputs, trace = _replay(job["stream_file"], args, kwargs, job["mode"], job["target"], job.get("api"),
                                     out_dir, kept)
            status["kernel_seconds"] = time.perf_counter() - t0
            _write_results(status, job, out_dir, outputs, trace, None, traceio)
            raise _Done
        status["stage"] = "import"
        # The parent starts the import clock when this file appears (interpreter start-up is not the student's).
        _atomic_write_bytes(os.path.join(out_dir, "import.started"), b"")
        module = _load_student_module(job["module_path"], job["module_name"])
        if job["mode"] == "import":
            # The import check: which of the rubric's functions the module lacks; no kernel runs.
            wanted = [f for f in job.get("functions", []) if isinstance(f, str)]
            status["missing"] = [f for f in wanted if not callable(module.__dict__.get(f))]
            status["ok"] = True
            status["stage"] = "done"
            raise _Done
        kernel = module.__dict__.get(job["function"])
        if kernel is None:
            raise LookupError(f"{os.path.basename(job['module_path'])} defines no function {job['function']!r}")
        if not callable(kernel):
            raise TypeError(f"{job['function']!r} is not callable")

        status["stage"] = "kernel"
        t0 = time.perf_counter()
        if job["backend"] == "nkisim" and job.get("want_stream"):
            kept.append(_specialize(kernel, args, kwargs, job["target"], out_dir))
            outputs = trace = latency = None
        elif job["backend"] == "nkisim":
            outputs, trace = _run_nkisim(kernel, args, kwargs, job["mode"], job["target"])
            latency = None
        else:
            outputs, latency, status["hardware"] = _run_neuron(
                kernel, args, kwargs, job["mode"], bool(job.get("want_trace")), job.get("api")
            )
            trace = None
        status["kernel_seconds"] = time.perf_counter() - t0
        _write_results(status, job, out_dir, outputs, trace, latency, traceio)
    except _Done:
        pass
    except BaseException as exc:  # noqa: BLE001 - SystemExit/KeyboardInterrupt from student code are verdicts too
        status["error_type"] = type(exc).__name__
        status["error"] = str(exc)[:MAX_MESSAGE]
        status["traceback"] = "".join(traceback.format_exception(exc))[-MAX_MESSAGE:]
    status["seconds"] = time.perf_counter() - started
    try:  # CPU seconds of this process (a figure for the TA's overview; like all of status.json, not trusted)
        import resource

        usage = resource.getrusage(resource.RUSAGE_SELF)
        status["cpu_seconds"] = usage.ru_utime + usage.ru_stime
    except BaseException:  # noqa: BLE001
        pass
    try:
        _atomic_write_bytes(os.path.join(out_dir, "status.json"), json.dumps(status).encode("utf-8"))
    except BaseException:  # noqa: BLE001
        os._exit(3)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip atexit handlers and finalizers student code may have registered


if __name__ == "__main__":
    main()
