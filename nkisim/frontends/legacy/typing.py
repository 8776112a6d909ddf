"""neuronxcc.nki.typing (``nt``): kernel parameter annotations (``nkisim.frontends._typing``, shared with nki)."""

from __future__ import annotations

from nkisim.frontends._typing import TensorType, mutable, mutable_tensor, tensor  # noqa: F401  (public NKI names)


def __getattr__(name: str):
    from nkisim.frontends import LEGACY, _unsupported

    return _unsupported.missing(LEGACY, "nt", name)


del annotations  # the __future__ import must not leak as an NKI name
