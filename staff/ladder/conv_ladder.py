# STAFF-ONLY: the Part 2 optimisation ladder (partial solutions); excluded from the student release.
"""The handout's Part 2 journey as kernels: each step applies one piece of the handout's advice to the one before.

Every kernel has the course signature ``fused_conv2d_maxpool(X, W, bias, pool_size=1)`` and is correct on every
course shape (``staff/ladder/measure.py --check`` runs the part-2 harness's correctness tests on each).  They are
written from the handout's prose, not tuned to the model: ``docs/staff-notes.md`` records what each step buys on
nkisim and what the seeds' hardware numbers say about the same step.

* ``step0_naive``: the handout's starting point, literally.  For every output row, output-channel tile, input-
  channel tile and filter tap: load the 128x128 weight slice ``W[co, ci, p, q]`` (strided DMA), transpose it on
  the Tensor Engine, copy it to SBUF, load the shifted input row window, matmul into the row's PSUM tile.
* ``step1_inputs``: the input rows an output row needs are loaded once per row (one DMA per 128-channel tile,
  ``K`` rows), before the output-channel loop; the matmuls read shifted windows of them.
* ``step2_weights``: in addition, ``W`` is loaded once (natural layout, contiguous) and every 128x128 slice is
  transposed once, before the main loop; the matmuls read the resident ``[ci, tap, co]`` stationaries.
* ``step3_psum``: in addition, each PSUM tile holds as many whole output rows as fit in one bank (2 rows of 222 at
  224x224, all 30 rows of 14 at 32x16), the block's input rows (+ halo) arrive with one DMA per channel tile, and
  PSUM is evacuated once per tile: bias (and the 2x2 max-pool, straight out of PSUM) in one or two instructions,
  then one store per block and output tile.
* the staff kernel (``grader/reference/part2/conv2d.py``) adds bands of 16 rows per input DMA and alternates the
  PSUM evacuation between ScalarE and VectorE.

Ablations (one piece of advice removed from a later step, to measure that piece alone):

* ``step2_fp32_operands``: step 2 with the matmul operands cast to float32 in SBUF (fp16 inputs only differ).
* ``step3_one_row``: step 3 with one output row per PSUM tile (moving free size 222 / 14 instead of 444 / 420).
* ``step3_single_buffers``: step 3 with every loop tile allocated once, before the loops (no buffer rotation).
* ``step3_single_input_buffer``: step 3 with only the input rows' tile allocated once, before the loops.
* ``step3_sbuf_accumulate``: step 3 accumulating the taps in SBUF (one PSUM tile per matmul, added with
  tensor_tensor) instead of in PSUM.
"""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


def _bias_columns(bias, out_tiles):
    """bias as a (128, out_tiles) float32 SBUF tile: column co holds bias[co*128:(co+1)*128]."""
    P = nl.tile_size.pmax
    bias_sb = nl.ndarray((P, out_tiles), dtype=nl.float32, buffer=nl.sbuf)
    bias_rows = bias.reshape((out_tiles, P))
    for co in nl.affine_range(out_tiles):
        nisa.dma_copy(src=bias_rows[co], dst=bias_sb[:, co : co + 1])
    return bias_sb


def _resident_weights(W, in_tiles, out_tiles, taps, dtype):
    """w_t[:, ci, tap, co*128:(co+1)*128] = W[co tile, ci tile, tap].T: loaded once, transposed once."""
    P = nl.tile_size.pmax
    out_channels, in_channels, _, _ = W.shape
    w_t = nl.ndarray((P, in_tiles, taps, out_channels), dtype=dtype, buffer=nl.sbuf)
    w_rows = W.reshape((out_channels, in_channels * taps))
    for co in nl.affine_range(out_tiles):
        w_nat = nl.ndarray((P, in_channels, taps), dtype=W.dtype, buffer=nl.sbuf)
        nisa.dma_copy(src=w_rows[co * P : (co + 1) * P, :], dst=w_nat.reshape((P, in_channels * taps)))
        for ci in nl.affine_range(in_tiles):
            for tap in nl.affine_range(taps):
                w_psum = nisa.nc_transpose(w_nat[:, ci * P : (ci + 1) * P, tap])
                w_t[:, ci, tap, co * P : (co + 1) * P] = nisa.tensor_copy(w_psum, dtype=dtype)
    return w_t


def _pool_rows(conv, out_width, dtype):
    """Max of a (128, 2, out_width) float32 SBUF tile over its two rows and pairs of columns: (128, out_width//2)."""
    P = nl.tile_size.pmax
    pooled_w = out_width // 2
    windows = conv[:, :, 0 : pooled_w * 2].reshape((P, 1, 2, pooled_w, 2))
    return nisa.tensor_reduce(nl.max, windows, axis=(2, 4), dtype=dtype).reshape((P, pooled_w))


def _store_row(conv, X_out, b, co, out_row, pool_size, out_width):
    """conv: (128, pool_size, out_width) float32 in SBUF, bias added; pools it if asked and stores one row."""
    P = nl.tile_size.pmax
    if pool_size == 1:
        result = nisa.tensor_copy(conv[:, 0, :], dtype=X_out.dtype)
    else:
        result = _pool_rows(conv, out_width, X_out.dtype)
    nisa.dma_copy(src=result, dst=X_out[b, co * P : (co + 1) * P, out_row, :])


class _Shape:
    """The sizes every kernel of the ladder derives from its inputs, the same way."""

    def __init__(self, X, W, pool_size):
        self.batch, in_channels, self.input_height, self.input_width = X.shape
        self.out_channels, _, self.K, _ = W.shape
        P = nl.tile_size.pmax
        self.in_tiles, self.out_tiles = in_channels // P, self.out_channels // P
        self.out_height, self.out_width = self.input_height - self.K + 1, self.input_width - self.K + 1
        self.pooled_h, self.pooled_w = self.out_height // pool_size, self.out_width // pool_size

    def output(self, dtype):
        return nl.ndarray((self.batch, self.out_channels, self.pooled_h, self.pooled_w), dtype=dtype, buffer=nl.hbm)


def _transposed_block(W, co, ci, p, q):
    """The starting point's stationary: W[co tile, ci tile, p, q] loaded (a strided DMA, one element per chunk),
    transposed on the Tensor Engine and copied back to SBUF, for one matmul."""
    P = nl.tile_size.pmax
    w_nat = nl.ndarray((P, P), dtype=W.dtype, buffer=nl.sbuf)
    nisa.dma_copy(src=W[co * P : (co + 1) * P, ci * P : (ci + 1) * P, p, q], dst=w_nat)
    return nisa.tensor_copy(nisa.nc_transpose(w_nat))


def _input_window(X, b, ci, row, q, out_width):
    """The starting point's moving operand: X[b, ci tile, row, q : q + out_width] loaded for one matmul."""
    P = nl.tile_size.pmax
    x_win = nl.ndarray((P, out_width), dtype=X.dtype, buffer=nl.sbuf)
    nisa.dma_copy(src=X[b, ci * P : (ci + 1) * P, row, q : q + out_width], dst=x_win)
    return x_win


def _one_row_per_tile(X, W, bias, pool_size, hoist_weights, hoist_inputs, operand_dtype):
    """Steps 0-2: one output row per PSUM tile.  hoist_weights: the stationaries are transposed once and stay in
    SBUF (else loaded and transposed for every matmul); hoist_inputs: the input rows of an output row are loaded
    once, before the output-channel loop (else every matmul loads its own window)."""
    s = _Shape(X, W, pool_size)
    P, K, out_width = nl.tile_size.pmax, s.K, s.out_width
    X_out = s.output(X.dtype)
    bias_sb = _bias_columns(bias, s.out_tiles)
    w_t = _resident_weights(W, s.in_tiles, s.out_tiles, K * K, operand_dtype) if hoist_weights else None

    for b in nl.affine_range(s.batch):
        for out_row in nl.affine_range(s.pooled_h):
            y0 = out_row * pool_size
            rows = None
            if hoist_inputs:
                rows = nl.ndarray((P, s.in_tiles, pool_size + K - 1, s.input_width), dtype=X.dtype, buffer=nl.sbuf)
                for ci in nl.affine_range(s.in_tiles):
                    nisa.dma_copy(src=X[b, ci * P : (ci + 1) * P, y0 : y0 + pool_size + K - 1, :], dst=rows[:, ci])
                if operand_dtype != X.dtype:
                    rows = nisa.tensor_copy(rows, dtype=operand_dtype)
            for co in nl.affine_range(s.out_tiles):
                conv = nl.ndarray((P, pool_size, out_width), dtype=nl.float32, buffer=nl.sbuf)
                for r in nl.affine_range(pool_size):
                    acc = nl.zeros((P, out_width), dtype=nl.float32, buffer=nl.psum)
                    for ci in nl.affine_range(s.in_tiles):
                        for p in nl.affine_range(K):
                            for q in nl.affine_range(K):
                                if hoist_weights:
                                    stationary = w_t[:, ci, p * K + q, co * P : (co + 1) * P]
                                else:
                                    stationary = _transposed_block(W, co, ci, p, q)
                                if hoist_inputs:
                                    moving = rows[:, ci, r + p, q : q + out_width]
                                else:
                                    moving = _input_window(X, b, ci, y0 + r + p, q, out_width)
                                acc += nisa.nc_matmul(stationary, moving)
                    conv[:, r, :] = nisa.tensor_scalar(acc, nl.add, bias_sb[:, co : co + 1])
                _store_row(conv, X_out, b, co, out_row, pool_size, out_width)
    return X_out


@nki.compiler.skip_middle_end_transformations
@nki.jit
def step0_naive(X, W, bias, pool_size=1):
    return _one_row_per_tile(X, W, bias, pool_size, hoist_weights=False, hoist_inputs=False, operand_dtype=X.dtype)


@nki.compiler.skip_middle_end_transformations
@nki.jit
def inputs_first(X, W, bias, pool_size=1):
    return _one_row_per_tile(X, W, bias, pool_size, hoist_weights=False, hoist_inputs=True, operand_dtype=X.dtype)


@nki.compiler.skip_middle_end_transformations
@nki.jit
def step1_weights(X, W, bias, pool_size=1):
    return _one_row_per_tile(X, W, bias, pool_size, hoist_weights=True, hoist_inputs=False, operand_dtype=X.dtype)


@nki.compiler.skip_middle_end_transformations
@nki.jit
def step2_inputs(X, W, bias, pool_size=1):
    return _one_row_per_tile(X, W, bias, pool_size, hoist_weights=True, hoist_inputs=True, operand_dtype=X.dtype)


@nki.compiler.skip_middle_end_transformations
@nki.jit
def step2_fp32_operands(X, W, bias, pool_size=1):
    return _one_row_per_tile(X, W, bias, pool_size, hoist_weights=True, hoist_inputs=True, operand_dtype=nl.float32)


def _rows_per_tile(conv_rows, out_width, pool_size, max_rows):
    """Whole output rows per PSUM tile: as many as fit in one bank (<= max_rows), a multiple of pool_size."""
    rows = min(conv_rows, nl.tile_size.psum_fmax // out_width, max_rows)
    return max(pool_size, rows - rows % pool_size)


def _evacuate(acc, bias_col, rows, out_width, pool_size, dtype):
    """PSUM (128, rows, out_width) -> SBUF in X's dtype: + bias, and the 2x2 max-pool straight out of PSUM."""
    P = nl.tile_size.pmax
    if pool_size == 1:
        return nisa.tensor_scalar(acc, nl.add, bias_col, dtype=dtype)
    pooled_w = out_width // 2
    windows = acc[:, :, 0 : pooled_w * 2].reshape((P, rows // 2, 2, pooled_w, 2))
    pooled = nisa.tensor_reduce(nl.max, windows, axis=(2, 4), dtype=nl.float32)
    return nisa.tensor_scalar(pooled, nl.add, bias_col, dtype=dtype)


def _step3_blocks(X, W, bias, pool_size, max_rows, sbuf_accumulate=False, single_buffers=False,
                  single_input=False):
    """Step 3: several whole output rows per PSUM tile (at most max_rows), weights and inputs loaded once.
    sbuf_accumulate: the taps are added up in SBUF, one PSUM tile per matmul; single_buffers: every loop tile is
    allocated once, before the loops, and reused by every block (the accumulator cleared with memset);
    single_input: only the input rows' tile is allocated once (the mistake students make most: the PSUM tile and
    the result are still allocated in the loop)."""
    s = _Shape(X, W, pool_size)
    P, K, out_width = nl.tile_size.pmax, s.K, s.out_width
    conv_rows = s.pooled_h * pool_size
    X_out = s.output(X.dtype)
    bias_sb = _bias_columns(bias, s.out_tiles)
    w_t = _resident_weights(W, s.in_tiles, s.out_tiles, K * K, W.dtype)

    rows = _rows_per_tile(conv_rows, out_width, pool_size, max_rows)
    blocks, tail = conv_rows // rows, conv_rows % rows
    if single_buffers or single_input:
        x_one = nl.ndarray((P, s.in_tiles, rows + K - 1, s.input_width), dtype=X.dtype, buffer=nl.sbuf)
    if single_buffers:
        acc_one = nl.ndarray((P, rows, out_width), dtype=nl.float32, buffer=nl.psum)
        result_one = nl.ndarray((P, rows // pool_size, s.pooled_w), dtype=X.dtype, buffer=nl.sbuf)
    for b in nl.affine_range(s.batch):
        for blk in nl.static_range(blocks + (1 if tail else 0)):
            n = rows if blk < blocks else tail
            y0 = blk * rows
            if single_buffers or single_input:
                x_blk = x_one[:, :, 0 : n + K - 1, :]
            else:
                x_blk = nl.ndarray((P, s.in_tiles, n + K - 1, s.input_width), dtype=X.dtype, buffer=nl.sbuf)
            for ci in nl.affine_range(s.in_tiles):
                nisa.dma_copy(src=X[b, ci * P : (ci + 1) * P, y0 : y0 + n + K - 1, :], dst=x_blk[:, ci])
            for co in nl.affine_range(s.out_tiles):
                if single_buffers:
                    acc = acc_one[:, 0:n, :]
                    acc[...] = nisa.memset((P, n, out_width), 0.0, nl.float32)
                else:
                    acc = nl.zeros((P, n, out_width), dtype=nl.float32, buffer=nl.sbuf if sbuf_accumulate else nl.psum)
                for ci in nl.affine_range(s.in_tiles):
                    for p in nl.affine_range(K):
                        for q in nl.affine_range(K):
                            product = nisa.nc_matmul(
                                w_t[:, ci, p * K + q, co * P : (co + 1) * P], x_blk[:, ci, p : p + n, q : q + out_width]
                            )
                            if sbuf_accumulate:
                                acc[...] = nisa.tensor_tensor(acc, product, op=nl.add)
                            else:
                                acc += product
                result = _evacuate(acc, bias_sb[:, co : co + 1], n, out_width, pool_size, X.dtype)
                if single_buffers:
                    result_one[:, 0 : n // pool_size, :] = result
                    result = result_one[:, 0 : n // pool_size, :]
                out0 = y0 // pool_size
                nisa.dma_copy(src=result, dst=X_out[b, co * P : (co + 1) * P, out0 : out0 + n // pool_size, :])
    return X_out


@nki.compiler.skip_middle_end_transformations
@nki.jit
def step3_psum(X, W, bias, pool_size=1):
    return _step3_blocks(X, W, bias, pool_size, max_rows=512)


@nki.compiler.skip_middle_end_transformations
@nki.jit
def step3_one_row(X, W, bias, pool_size=1):
    return _step3_blocks(X, W, bias, pool_size, max_rows=pool_size)


@nki.compiler.skip_middle_end_transformations
@nki.jit
def step3_sbuf_accumulate(X, W, bias, pool_size=1):
    return _step3_blocks(X, W, bias, pool_size, max_rows=512, sbuf_accumulate=True)


@nki.compiler.skip_middle_end_transformations
@nki.jit
def step3_single_buffers(X, W, bias, pool_size=1):
    return _step3_blocks(X, W, bias, pool_size, max_rows=512, single_buffers=True)


@nki.compiler.skip_middle_end_transformations
@nki.jit
def step3_single_input_buffer(X, W, bias, pool_size=1):
    return _step3_blocks(X, W, bias, pool_size, max_rows=512, single_input=True)
