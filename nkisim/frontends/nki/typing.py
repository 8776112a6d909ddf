"""nki.typing (``nt``): kernel parameter annotations, ``x: nt.tensor[128, 512]`` (NKI 0.3 migration guide,
"nki.typing module"); the same objects as the legacy ``neuronxcc.nki.typing`` (``nkisim.frontends._typing``)."""

from __future__ import annotations

from nkisim.frontends._typing import TensorType, mutable, mutable_tensor, tensor  # noqa: F401  (public NKI names)


def __getattr__(name: str):
    raise AttributeError(f"module 'nki.typing' has no attribute '{name}'")


del annotations  # the __future__ import must not leak as an NKI name
