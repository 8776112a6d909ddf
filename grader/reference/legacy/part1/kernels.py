# STAFF-ONLY: excluded from the student release (tools/release.py checks for this marker).
"""Staff reference for part 1 (not distributed): the starter kernels unchanged, plus a fast matrix_transpose.
Legacy edition (``neuronxcc.nki``); the current-API twin is grader/reference/part1/kernels.py.

Every kernel is a plain NKI kernel (``neuronxcc.nki``).  On a Trainium instance it is compiled by neuronx-cc and
runs on a NeuronCore; anywhere else the same file runs on nkisim, the course's emulator.  Run them with
``python part1/run_benchmark.py --kernel {naive,tiled,stream,transpose} -n N``.

``skip_middle_end_transformations`` keeps the compiler from reordering or fusing your loops, so what you write
is what runs (and ``affine_range`` behaves like ``sequential_range``).
"""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.compiler.skip_middle_end_transformations
@nki.jit
def vector_add_naive(a_vec, b_vec):
    """Adds two 1-D vectors in a single shot.

    The whole vector becomes one SBUF tile with one element per partition, so this only works while the
    vector fits in the 128 partitions of SBUF (N <= 128).
    """
    out = nl.ndarray(shape=a_vec.shape, dtype=a_vec.dtype, buffer=nl.hbm)

    # One element per partition: shape (N, 1).
    a_sbuf = nl.ndarray(shape=(a_vec.shape[0], 1), dtype=a_vec.dtype, buffer=nl.sbuf)
    b_sbuf = nl.ndarray(shape=(b_vec.shape[0], 1), dtype=b_vec.dtype, buffer=nl.sbuf)

    # HBM -> SBUF.
    nisa.dma_copy(src=a_vec, dst=a_sbuf)
    nisa.dma_copy(src=b_vec, dst=b_sbuf)

    # a + b, with b used as a per-partition scalar (one value per partition).
    sum_sbuf = nisa.tensor_scalar(a_sbuf, nl.add, b_sbuf)

    # SBUF -> HBM.
    nisa.dma_copy(src=sum_sbuf, dst=out)
    return out


@nki.compiler.skip_middle_end_transformations
@nki.jit
def vector_add_tiled(a_vec, b_vec):
    """Adds two 1-D vectors ROW_CHUNK elements at a time (one element per partition).

    Step 1 of the handout: try larger values of ROW_CHUNK and watch the execution time (and what happens
    beyond 128).
    """
    ROW_CHUNK = 1

    (N,) = a_vec.shape
    assert N % ROW_CHUNK == 0, f"vector length {N} must be a multiple of ROW_CHUNK={ROW_CHUNK}"
    out = nl.ndarray(shape=a_vec.shape, dtype=a_vec.dtype, buffer=nl.hbm)

    for chunk in nl.affine_range(N // ROW_CHUNK):
        lo = chunk * ROW_CHUNK
        a_tile = nl.ndarray(shape=(ROW_CHUNK, 1), dtype=a_vec.dtype, buffer=nl.sbuf)
        b_tile = nl.ndarray(shape=(ROW_CHUNK, 1), dtype=b_vec.dtype, buffer=nl.sbuf)

        nisa.dma_copy(src=a_vec[lo : lo + ROW_CHUNK], dst=a_tile)
        nisa.dma_copy(src=b_vec[lo : lo + ROW_CHUNK], dst=b_tile)

        sum_tile = nisa.tensor_scalar(a_tile, nl.add, b_tile)

        nisa.dma_copy(src=sum_tile, dst=out[lo : lo + ROW_CHUNK])
    return out


@nki.compiler.skip_middle_end_transformations
@nki.jit
def vector_add_stream(a_vec, b_vec):
    """Adds two 1-D vectors as a stream of (128, FREE_DIM) tiles.

    The vector is viewed as a (128, N/128) matrix so every partition holds a row; each loop iteration moves
    FREE_DIM columns.  Step 2 of the handout: raise FREE_DIM and explain the speed-up (and its limit).
    """
    FREE_DIM = 2

    PARTITIONS = nl.tile_size.pmax  # 128
    (N,) = a_vec.shape
    assert N % PARTITIONS == 0, f"vector length {N} must be a multiple of {PARTITIONS}"
    COLS = N // PARTITIONS
    assert COLS % FREE_DIM == 0, f"N/128 = {COLS} must be a multiple of FREE_DIM={FREE_DIM}"

    a_mat = a_vec.reshape((PARTITIONS, COLS))
    b_mat = b_vec.reshape((PARTITIONS, COLS))
    out = nl.ndarray(shape=(PARTITIONS, COLS), dtype=a_vec.dtype, buffer=nl.hbm)

    for col_tile in nl.affine_range(COLS // FREE_DIM):
        lo = col_tile * FREE_DIM
        a_tile = nl.ndarray(shape=(PARTITIONS, FREE_DIM), dtype=a_vec.dtype, buffer=nl.sbuf)
        b_tile = nl.ndarray(shape=(PARTITIONS, FREE_DIM), dtype=b_vec.dtype, buffer=nl.sbuf)

        nisa.dma_copy(src=a_mat[:, lo : lo + FREE_DIM], dst=a_tile)
        nisa.dma_copy(src=b_mat[:, lo : lo + FREE_DIM], dst=b_tile)

        sum_tile = nisa.tensor_tensor(a_tile, b_tile, op=nl.add)

        nisa.dma_copy(src=sum_tile, dst=out[:, lo : lo + FREE_DIM])
    return out.reshape(a_vec.shape)


@nki.compiler.skip_middle_end_transformations
@nki.jit
def matrix_transpose(a_tensor):
    """Returns the transpose of the (M, N) matrix ``a_tensor`` as a new (N, M) HBM tensor (M, N multiples of 128).

    Only ``nisa.nc_transpose`` computes.  Rows are processed in bands of up to 8 blocks of 128 rows, columns in
    chunks of COL_CHUNK; each band chunk arrives with one DMA per row block.  For every 128-column block, the
    transposed 128x128 blocks of the band are gathered side by side in PSUM (4 per 2 KiB bank), copied to one
    SBUF tile (VectorE and ScalarE take one bank each) and leave with a single DMA whose per-partition runs are
    ``band * 128`` elements long (4 KiB for fp32 with band = 8), the size at which DMAs reach full bandwidth.
    """
    P = nl.tile_size.pmax
    COL_CHUNK = 1024
    BLOCKS_PER_BANK = 4  # 4 x 128 fp32 = 512 values per partition = one 2 KiB PSUM bank
    M, N = a_tensor.shape
    assert M % P == 0 and N % P == 0, f"matrix_transpose needs multiples of {P}, got {a_tensor.shape}"
    out = nl.ndarray(shape=(N, M), dtype=a_tensor.dtype, buffer=nl.hbm)

    row_blocks = M // P
    band = next(b for b in (8, 4, 2, 1) if row_blocks % b == 0)
    banks = max(1, band // BLOCKS_PER_BANK)
    per_bank = band // banks
    cols = min(N, COL_CHUNK)
    while N % cols:
        cols -= P
    col_blocks = cols // P

    for band_idx in nl.affine_range(row_blocks // band):
        row0 = band_idx * band * P
        for chunk in nl.affine_range(N // cols):
            col0 = chunk * cols
            in_tile = nl.ndarray((P, band, cols), dtype=a_tensor.dtype, buffer=nl.sbuf)
            for r in nl.affine_range(band):
                nisa.dma_copy(src=a_tensor[row0 + r * P : row0 + (r + 1) * P, col0 : col0 + cols], dst=in_tile[:, r, :])
            for cb in nl.affine_range(col_blocks):
                t_sbuf = nl.ndarray((P, band * P), dtype=a_tensor.dtype, buffer=nl.sbuf)
                for bank in nl.static_range(banks):  # trace-time int: picks the copy engine
                    t_psum = nl.ndarray((P, per_bank * P), dtype=a_tensor.dtype, buffer=nl.psum)
                    for r in nl.affine_range(per_bank):
                        block = in_tile[:, bank * per_bank + r, cb * P : (cb + 1) * P]
                        t_psum[:, r * P : (r + 1) * P] = nisa.nc_transpose(block)
                    lo = bank * per_bank * P
                    # alternate the PSUM evictions between VectorE and ScalarE (activation(copy) runs on
                    # ScalarE on trn1 too, where ScalarE has no tensor_copy)
                    if bank % 2 == 0:
                        t_sbuf[:, lo : lo + per_bank * P] = nisa.tensor_copy(t_psum, engine=nisa.vector_engine)
                    else:
                        t_sbuf[:, lo : lo + per_bank * P] = nisa.activation(op=nl.copy, data=t_psum)
                out_row0 = col0 + cb * P
                nisa.dma_copy(src=t_sbuf, dst=out[out_row0 : out_row0 + P, row0 : row0 + band * P])
    return out
