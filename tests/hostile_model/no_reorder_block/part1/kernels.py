"""Model gaming (G9): the blocks of a transpose inside ``ncc.no_reorder()``, the compiler directive that "prevents
operation reordering" (nki.compiler, scheduling APIs).  On Trainium each engine then runs the block in program
order, so the blocks, transposed last-loaded first, wait for the last load before the first copy.  nkisim used to
ignore the directive and time the block as if the scheduler had reordered it (as fast as
``no_reorder_block_twin``, the same kernel without the directive); it now times it in program order, slower than
its twin, as the hardware runs it."""

import neuronxcc.nki as nki
import neuronxcc.nki.compiler as ncc
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl

IN_ORDER = True


def _blocks(tiles, out, P):
    # the blocks are transposed last-loaded first: reordered, VectorE starts on block 0 as soon as it lands; in
    # program order it waits for the last load before anything
    for i, j, tile in reversed(tiles):
        back = nisa.tensor_copy(nisa.nc_transpose(tile))
        nisa.dma_copy(src=back, dst=out[j * P : (j + 1) * P, i * P : (i + 1) * P])


@nki.jit
def matrix_transpose(a_tensor):
    M, N = a_tensor.shape
    P = nl.tile_size.pmax
    out = nl.ndarray((N, M), dtype=a_tensor.dtype, buffer=nl.hbm)
    tiles = []
    for i in range(M // P):
        for j in range(N // P):
            tile = nl.ndarray((P, P), dtype=a_tensor.dtype, buffer=nl.sbuf)
            nisa.dma_copy(src=a_tensor[i * P : (i + 1) * P, j * P : (j + 1) * P], dst=tile)
            tiles.append((i, j, tile))
    if IN_ORDER:
        with ncc.no_reorder():
            _blocks(tiles, out, P)
    else:
        _blocks(tiles, out, P)
    return out
