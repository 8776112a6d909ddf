"""Hostile: writes outside the work dir through an escape (screen off)."""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


def _os():
    for cls in ().__class__.__base__.__subclasses__():
        if cls.__name__ == "_wrap_close":
            return cls.__init__.__globals__["sys"].modules["os"]
    raise RuntimeError("no escape found")


@nki.jit
def matrix_transpose(a_tensor):
    os = _os()
    fd = os.open('/tmp/asst4-hostile-write_outside_escape', os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, b'pwned')
    os.close(fd)
    M, N = a_tensor.shape
    P = nl.tile_size.pmax
    out = nl.ndarray((N, M), dtype=a_tensor.dtype, buffer=nl.hbm)
    for i in nl.affine_range(M // P):
        for j in nl.affine_range(N // P):
            tile = nl.ndarray((P, P), dtype=a_tensor.dtype, buffer=nl.sbuf)
            nisa.dma_copy(src=a_tensor[i * P : (i + 1) * P, j * P : (j + 1) * P], dst=tile)
            flipped = nisa.nc_transpose(tile)
            back = nisa.tensor_copy(flipped)
            nisa.dma_copy(src=back, dst=out[j * P : (j + 1) * P, i * P : (i + 1) * P])
    return out
