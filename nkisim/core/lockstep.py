"""An LNC=2 launch: the two NeuronCores' programs run in lockstep, so that cross-core synchronisation works.

"For LNC2 kernels (``kernel[2]``), the simulator spawns two Python threads that execute the kernel concurrently,
each with its own ``program_id``.  Input arrays use ``shared_hbm`` buffers, so both threads can access shared
memory.  ``nki.isa.sendrecv`` and ``nki.isa.core_barrier`` use thread-safe synchronization primitives" (aws-neuron-sdk
nki/guides/nki_simulator.rst, "Execution").  nkisim runs each core's program in a thread of its own too, but only one
at a time: a program runs until it reaches a synchronisation point (``nisa.sendrecv``, ``nisa.core_barrier``) or
returns, and then hands over to the other.  When both have reached their point the second one performs the exchange
and runs on; the first resumes at its next turn.  A run is therefore deterministic, and a kernel without
synchronisation runs as before: core 0's program whole, then core 1's.

Each core has its own :class:`~nkisim.core.context.KernelContext` (its SBUF, PSUM, registers, engines, trace and
allocation bookkeeping: two physical NeuronCores, "two physical cores ... that have shared HBM memory", nki/get-started/
about/lnc.rst); the kernel's arguments and its ``nl.shared_hbm`` tensors are the only tensors both see.  The two
points that meet must be the same kind of synchronisation, in the same order on both cores ("the Neuron SDK assumes
that when running a kernel on multiple cores, the program on each core is 'the same'", lnc.rst); anything else --
a sendrecv meeting a barrier, different ``pipe_id`` values, a core returning while the other waits -- is a
:class:`LockstepError` naming both places, never a hang; it is a run-time fault of the device program (see
:class:`Lockstep`), raised when both programs have returned.

Nothing here lets one core's Python see the other's device data: the exchange moves values between the cores'
tensors inside the instruction, as the DMA does.
"""

from __future__ import annotations

import contextvars
import threading
from dataclasses import dataclass

from nkisim.core import context as _context
from nkisim.core.context import KernelContext
from nkisim.core.rules import NKIError, message


class LockstepError(NKIError):
    """The two cores' synchronisation points do not pair up (a kernel error, as on hardware, where it hangs)."""

    def __init__(self, detail: str) -> None:
        super().__init__("nkisim_lnc_lockstep", message("nkisim_lnc_lockstep", detail=detail))


class _Unwind(BaseException):
    """Unwinds a core's program after the other core failed (internal: never reported)."""


@dataclass(eq=False)
class Arrival:
    """One core at a synchronisation point: what it is (``kind``, ``key``: must equal the peer's), where (the kernel
    statement), and the operands the exchange needs.  ``sync`` is the launch-wide number of the meeting (the trace
    records it on both cores' instructions; the performance model makes them meet)."""

    core: int
    kind: str
    key: tuple
    where: str
    operands: tuple = ()
    matched: bool = False
    sync: int = -1


# what Lockstep.arrive returns when the launch's synchronisation failed (Lockstep.failure says why)
FAILED = Arrival(-1, "failed", (), "")


class Lockstep:
    """The cores of one LNC launch and whose turn it is.

    A synchronisation that cannot happen (mismatched points, a core returning while the other waits) is the
    launch's ``failure``: a run-time error of the device program, like an access outside a tensor
    (``core.ops.registers.fault``).  The cores' instructions record it and run on without synchronising; the error
    is raised once both programs have returned (``runtime._run_lockstep``), so kernel code cannot catch it, and
    whether two dynamic loops' iteration counts (device values) agree stays hidden from the kernel's Python."""

    def __init__(self, ctxs: list[KernelContext]) -> None:
        self.ctxs = ctxs
        self.cond = threading.Condition()
        self.turn = 0
        n = len(ctxs)
        self.done = [False] * n
        self.waiting: list[Arrival | None] = [None] * n
        self.errors: list[BaseException | None] = [None] * n
        self.results: list = [None] * n
        self.abort = False  # a core's Python raised: the others unwind
        self.failure: LockstepError | None = None
        self.syncs = 0
        for c in ctxs:
            c.lockstep = self

    def run(self, fn, args, kwargs) -> list:
        """Run ``fn(*args, **kwargs)`` once per core, in lockstep; each core's return value.  The first error a
        core's Python raised is raised (a core unwound because the other failed reports nothing)."""
        threads = [threading.Thread(target=self._main, args=(k, fn, args, kwargs, contextvars.copy_context()),
                                    name=f"nkisim-core{k}", daemon=True) for k in range(len(self.ctxs))]
        stack = _context._STACK
        try:
            for t in threads:
                t.start()
            with self.cond:
                self.cond.wait_for(lambda: all(self.done))
            for t in threads:
                t.join()
        except BaseException:
            self._stop(threads)  # the launching thread was interrupted (Ctrl-C, a test timeout)
            raise
        finally:
            stack[-1] = self.ctxs[0]
        for err in self.errors:
            if err is not None and not isinstance(err, _Unwind):
                raise err
        return self.results

    def _stop(self, threads: list[threading.Thread]) -> None:
        """Unwind the cores' threads before the launch returns, so that none runs on with the context stack the
        next kernel run uses: the waiting ones wake to an abort, the running one gets :class:`_Unwind` raised in it
        (CPython's asynchronous exception, delivered at its next bytecode)."""
        import ctypes  # only here: no module attribute hands it to anyone

        with self.cond:
            self.abort = True
            self.cond.notify_all()
        for t in threads:
            if t.is_alive() and t.ident is not None:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(t.ident), ctypes.py_object(_Unwind))
        for t in threads:
            if t.ident is not None:
                t.join(timeout=10.0)

    def _main(self, k: int, fn, args, kwargs, cv: contextvars.Context) -> None:
        with self.cond:
            self.cond.wait_for(lambda: self.turn == k or self.abort)
            started = not self.abort
            if started:
                _context._STACK[-1] = self.ctxs[k]
        try:
            if started:
                # the thread runs in a copy of the launching thread's context: NumPy's error state (errstate, a
                # context variable) and the kernel context stack the main thread set up
                self.results[k] = cv.run(fn, *args, **kwargs)
        except BaseException as e:  # noqa: BLE001 - reported by run(), in the launching thread
            self.errors[k] = e
        finally:
            self._finish(k)

    def _finish(self, k: int) -> None:
        with self.cond:
            self.done[k] = True
            if self.errors[k] is not None:
                self.abort = True  # the waiting cores unwind (_Unwind): the error is this core's Python's
            for j, w in enumerate(self.waiting):
                if w is not None and not self.abort:
                    # the other core waits at a point this core's program never reached
                    self._fail(f"core {j} reached nisa.{w.kind} at {w.where}, but core {k} returned from the kernel "
                               f"without reaching a matching nisa.{w.kind}: {_SAME}")
                    self.waiting[j] = None
            rest = [j for j in range(len(self.done)) if not self.done[j]]
            if rest:
                self._hand_to(rest[0])
            self.cond.notify_all()

    def _hand_to(self, j: int) -> None:
        self.turn = j
        _context._STACK[-1] = self.ctxs[j]

    def _fail(self, detail: str) -> None:
        if self.failure is None:
            self.failure = LockstepError(detail)

    def arrive(self, a: Arrival, check) -> Arrival | None:
        """Core ``a.core`` reached a synchronisation point.  Returns the other core's arrival when this core is
        the second to arrive (the caller performs the exchange: both operands are final, the other core is
        parked at its point), None when it waited for the other, :data:`FAILED` when the launch's synchronisation
        failed (now or before: ``failure``).  ``check(first, second)`` says why two arrivals of the same key cannot
        meet (mismatched operands), or None."""
        k = a.core
        with self.cond:
            if self.abort:
                raise _Unwind
            if self.failure is not None:
                return FAILED
            peers = [w for j, w in enumerate(self.waiting) if j != k and w is not None]
            if peers:
                first = peers[0]
                self.waiting[first.core] = None
                if first.kind != a.kind or first.key != a.key:
                    problem = (f"core {first.core} waits at nisa.{first.kind}{_show(first.key)} ({first.where}) while "
                               f"core {k} reached nisa.{a.kind}{_show(a.key)} ({a.where}): the two cores' "
                               f"synchronisation points must pair up in program order; {_SAME}")
                else:
                    problem = check(first, a)
                if problem is not None:
                    self._fail(problem)
                    return FAILED
                first.sync = a.sync = self.syncs
                self.syncs += 1
                first.matched = a.matched = True
                return first
            others = [j for j in range(len(self.done)) if j != k]
            if all(self.done[j] for j in others):
                self._fail(f"core {k} reached nisa.{a.kind} at {a.where}, but core {others[0]} returned from the "
                           f"kernel without reaching a matching nisa.{a.kind}: {_SAME}")
                return FAILED
            self.waiting[k] = a
            self._hand_to(next(j for j in others if not self.done[j]))
            self.cond.notify_all()
            self.cond.wait_for(lambda: self.turn == k or self.abort)
            if self.abort:
                raise _Unwind
            if a.matched:
                return None
            self.waiting[k] = None
            return FAILED


_SAME = ("every core must reach the same synchronisations in the same order (nki/get-started/about/lnc.rst: the "
         "program on each core must be 'the same'; on Trainium the cores would wait for each other forever)")


def _show(key: tuple) -> str:
    return f"(pipe_id={key[1]})" if len(key) > 1 and key[0] == "sendrecv" else ""
