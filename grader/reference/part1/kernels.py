# STAFF-ONLY: excluded from the student release (tools/release.py checks for this marker).
"""Staff reference for part 1 (not distributed): the starter kernels unchanged, plus a fast matrix_transpose.

Current NKI API (``import nki``); the legacy edition's twin is grader/reference/legacy/part1/kernels.py, statement
for statement the same kernel (tests/test_reference_nki_twins.py checks both compute the same bits at the same
modelled latency).  Run them with ``python part1/run_benchmark.py --kernel {naive,tiled,stream,transpose} -n N``.
"""

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def vector_add_naive(a_vec, b_vec):
    """Adds two 1-D vectors in a single shot.

    The whole vector becomes one SBUF tile with one element per partition, so this only works while the
    vector fits in the 128 partitions of SBUF (N <= 128).
    """
    out = nl.ndarray(a_vec.shape, dtype=a_vec.dtype, buffer=nl.shared_hbm)

    # One element per partition: shape (N, 1).
    a_sbuf = nl.ndarray((a_vec.shape[0], 1), dtype=a_vec.dtype, buffer=nl.sbuf)
    b_sbuf = nl.ndarray((b_vec.shape[0], 1), dtype=b_vec.dtype, buffer=nl.sbuf)

    # HBM -> SBUF.
    nisa.dma_copy(dst=a_sbuf, src=a_vec)
    nisa.dma_copy(dst=b_sbuf, src=b_vec)

    # a + b, with b used as a per-partition scalar (one value per partition).
    sum_sbuf = nl.ndarray((a_vec.shape[0], 1), dtype=a_vec.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=sum_sbuf, data=a_sbuf, op0=nl.add, operand0=b_sbuf)

    # SBUF -> HBM.
    nisa.dma_copy(dst=out, src=sum_sbuf)
    return out


@nki.jit
def vector_add_tiled(a_vec, b_vec):
    """Adds two 1-D vectors ROW_CHUNK elements at a time (one element per partition).

    Step 1 of the handout: try larger values of ROW_CHUNK and watch the execution time (and what happens
    beyond 128).
    """
    ROW_CHUNK = 1

    (N,) = a_vec.shape
    assert N % ROW_CHUNK == 0, f"vector length {N} must be a multiple of ROW_CHUNK={ROW_CHUNK}"
    out = nl.ndarray(a_vec.shape, dtype=a_vec.dtype, buffer=nl.shared_hbm)

    for chunk in nl.affine_range(N // ROW_CHUNK):
        lo = chunk * ROW_CHUNK
        a_tile = nl.ndarray((ROW_CHUNK, 1), dtype=a_vec.dtype, buffer=nl.sbuf)
        b_tile = nl.ndarray((ROW_CHUNK, 1), dtype=b_vec.dtype, buffer=nl.sbuf)

        nisa.dma_copy(dst=a_tile, src=a_vec[lo : lo + ROW_CHUNK])
        nisa.dma_copy(dst=b_tile, src=b_vec[lo : lo + ROW_CHUNK])

        sum_tile = nl.ndarray((ROW_CHUNK, 1), dtype=a_vec.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=sum_tile, data=a_tile, op0=nl.add, operand0=b_tile)

        nisa.dma_copy(dst=out[lo : lo + ROW_CHUNK], src=sum_tile)
    return out


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
    out = nl.ndarray((PARTITIONS, COLS), dtype=a_vec.dtype, buffer=nl.shared_hbm)

    for col_tile in nl.affine_range(COLS // FREE_DIM):
        lo = col_tile * FREE_DIM
        a_tile = nl.ndarray((PARTITIONS, FREE_DIM), dtype=a_vec.dtype, buffer=nl.sbuf)
        b_tile = nl.ndarray((PARTITIONS, FREE_DIM), dtype=b_vec.dtype, buffer=nl.sbuf)

        nisa.dma_copy(dst=a_tile, src=a_mat[:, lo : lo + FREE_DIM])
        nisa.dma_copy(dst=b_tile, src=b_mat[:, lo : lo + FREE_DIM])

        sum_tile = nl.ndarray((PARTITIONS, FREE_DIM), dtype=a_vec.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=sum_tile, data1=a_tile, data2=b_tile, op=nl.add)

        nisa.dma_copy(dst=out[:, lo : lo + FREE_DIM], src=sum_tile)
    return out.reshape(a_vec.shape)


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
    out = nl.ndarray((N, M), dtype=a_tensor.dtype, buffer=nl.shared_hbm)

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
                nisa.dma_copy(dst=in_tile[:, r, :], src=a_tensor[row0 + r * P : row0 + (r + 1) * P, col0 : col0 + cols])
            for cb in nl.affine_range(col_blocks):
                t_sbuf = nl.ndarray((P, band * P), dtype=a_tensor.dtype, buffer=nl.sbuf)
                for bank in nl.static_range(banks):  # trace-time int: picks the copy engine
                    t_psum = nl.ndarray((P, per_bank * P), dtype=a_tensor.dtype, buffer=nl.psum)
                    for r in nl.affine_range(per_bank):
                        block = in_tile[:, bank * per_bank + r, cb * P : (cb + 1) * P]
                        nisa.nc_transpose(dst=t_psum[:, r * P : (r + 1) * P], data=block)
                    lo = bank * per_bank * P
                    # alternate the PSUM evictions between VectorE and ScalarE (activation(copy) runs on
                    # ScalarE on trn1 too, where ScalarE has no tensor_copy)
                    if bank % 2 == 0:
                        nisa.tensor_copy(dst=t_sbuf[:, lo : lo + per_bank * P], src=t_psum, engine=nisa.engine.vector)
                    else:
                        nisa.activation(dst=t_sbuf[:, lo : lo + per_bank * P], op=nl.copy, data=t_psum)
                out_row0 = col0 + cb * P
                nisa.dma_copy(dst=out[out_row0 : out_row0 + P, row0 : row0 + band * P], src=t_sbuf)
    return out
