"""Errors of the timing layer.  Each names the failed step and what to do, so a broken setup is never timed."""

from __future__ import annotations


class BenchError(RuntimeError):
    """Base class: a timing, launch or profiling step could not be done as asked."""

    def __init__(self, message: str, *, step: str = "", hint: str = "") -> None:
        self.step = step
        self.hint = hint
        text = f"{step}: {message}" if step else message
        super().__init__(f"{text}\n  -> {hint}" if hint else text)


class NoBackendError(BenchError):
    """No toolchain on this machine can run a kernel of this API (neither the real one nor nkisim)."""


class HardwareError(BenchError):
    """The hardware path is missing a piece (compiler output, runtime module, NeuronCore, configuration)."""


class ProfileError(BenchError):
    """Profile files were asked for and could not be written.

    ``measurement`` holds the ordinary timing when it was taken before the profile step failed (it stands: the
    scripts print it, then this error).
    """

    measurement = None


class KernelError(RuntimeError):
    """The kernel itself raised while it ran in a helper process: its type, message and traceback text.

    ``str()`` is ``"TypeName: message"`` so that callers printing ``type(exc).__name__`` and the first line
    of the message show the student's own error, as an in-process launch would.
    """

    def __init__(self, type_name: str, message: str, traceback_text: str = "") -> None:
        self.type_name = type_name
        self.message = message
        self.traceback_text = traceback_text
        super().__init__(f"{type_name}: {message}")
