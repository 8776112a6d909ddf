# STAFF-ONLY: calibration corpus (validation rows); excluded from the student release.
"""Seed 000's depthwise conv1d kernels: AWS's ``conv1d_depthwise_default`` and Autocomp's optimisation steps.

Written by us from the prose and pseudocode of seeds/000 (the Autocomp blog post), with the structure of the
public nki-samples kernel it starts from; no code copied.  Signature of every step: ``kernel(img, filters)`` with
``img`` (N, C, 1, W) and ``filters`` (C, 1, 1, K), returning (N, C, 1, W): a depthwise 1-D cross-correlation with
``K // 2`` zeros of padding on both sides (output width = input width), channel ``c`` filtered by ``filters[c]``.
Channels are tiled by 128 onto the partitions; every output column is one ``[128, K]`` multiply
(``tensor_tensor``) and one sum over the K products (``tensor_reduce``): 65,536 of each at the seed's shape
(N=8, C=512, W=2048, K=3), measured on trn1 at 8.007 / 8.007 / 8.010 / 7.934 / 5.602 / 4.955 / 0.461 ms.

Steps (seeds/000):

* ``step0`` baseline: input (zero-padded) and filters prefetched into SBUF, the whole output staged in SBUF and
  stored at the end, three separate loop nests.  Deviation: the sample stages *all* N images in SBUF at once
  (in fp32 2 x 256 KiB per partition, in 16-bit 2 x 128 KiB), more than trn1's 176 KiB usable per partition;
  neuronx-cc (no ``skip_middle_end_transformations``) must split or spill that, which nkisim does not model.  Our
  step 0-2 stage one image at a time (the three loop nests inside one loop over images): the same DMAs (one
  per image and 128-channel tile, same sizes) and the same VectorE instruction stream.
* ``step1``: the filter tile indexed once per channel tile outside the width loop (a logical change).
* ``step2``: the store written with slices instead of index arrays (the same store).
* ``step3``: one loop nest over (image, channel tile); per iteration: DMA the image row and the filters into
  tiles allocated in the loop, the width loop, then store the output tile at once.
* ``step4``: step 3 with the width loop blocked by ``psum_fmax`` (512): each block's sums written into a PSUM
  tile, copied PSUM -> SBUF with ``tensor_copy`` and stored.
* ``step5``: loops swapped (channel tile outside, image inside) so each channel tile's filters are loaded once
  and copied into PSUM; the products read the filters from PSUM; outputs back in an SBUF tile per image.
* ``step6``: step 5 with the width loop split syntactically into blocks of 64 (the same instructions; on
  hardware the compiler then groups 128 columns per instruction: 512 ``tensor_tensor`` and 512 ``tensor_reduce``
  instead of 65,536, which nkisim does not model: see nkisim/perf/MODEL.md).
"""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


def _shapes(img, filters):
    n_img, channels, height, width = img.shape
    c_out, _, f_height, k = filters.shape
    assert height == 1 and f_height == 1, "conv1d: height 1 only"
    assert c_out == channels, "depthwise: one filter per channel"
    p = nl.tile_size.pmax
    assert channels % p == 0, "channels must be a multiple of 128"
    return n_img, channels // p, width, k, p


def _baseline(img, filters, hoist: bool, slice_store: bool):
    """Steps 0-2 (see the module docstring for the per-image staging)."""
    n_img, n_ct, width, k, p = _shapes(img, filters)
    pad = k // 2
    out = nl.ndarray((n_img, n_ct * p, 1, width), dtype=img.dtype, buffer=nl.hbm)

    # filters of every channel tile, channels on partitions
    filt_sb = nl.ndarray((n_ct, nl.par_dim(p), k), dtype=filters.dtype, buffer=nl.sbuf)
    for ct in nl.affine_range(n_ct):
        filt_sb[ct] = nl.load(filters[ct * p:(ct + 1) * p, 0, 0, :])

    for n in nl.affine_range(n_img):
        # 1. the image, zero-padded on both sides, all channel tiles
        img_sb = nl.zeros((n_ct, nl.par_dim(p), width + 2 * pad), dtype=img.dtype, buffer=nl.sbuf)
        for ct in nl.affine_range(n_ct):
            img_sb[ct, :, pad:pad + width] = nl.load(img[n, ct * p:(ct + 1) * p, 0, :])
        # 2. the output of this image, staged in SBUF
        out_sb = nl.ndarray((n_ct, nl.par_dim(p), width), dtype=img.dtype, buffer=nl.sbuf)
        for ct in nl.affine_range(n_ct):
            if hoist:
                filt = filt_sb[ct]
            for w in nl.affine_range(width):
                prod = nisa.tensor_tensor(img_sb[ct, :, w:w + k], filt if hoist else filt_sb[ct, :, 0:k],
                                          op=nl.multiply)
                out_sb[ct, :, w:w + 1] = nisa.tensor_reduce(nl.add, prod, axis=(1,), keepdims=True)
        # 3. the stores
        for ct in nl.affine_range(n_ct):
            if slice_store:
                nl.store(out[n, ct * p:(ct + 1) * p, 0, :], out_sb[ct])
            else:
                i_p, i_w = nl.mgrid[0:p, 0:width]
                nl.store(out[n, ct * p + i_p, 0, i_w], out_sb[ct, i_p, i_w])
    return out


@nki.jit
def step0(img, filters):
    return _baseline(img, filters, hoist=False, slice_store=False)


@nki.jit
def step1(img, filters):
    return _baseline(img, filters, hoist=True, slice_store=False)


@nki.jit
def step2(img, filters):
    return _baseline(img, filters, hoist=True, slice_store=True)


@nki.jit
def step3(img, filters):
    n_img, n_ct, width, k, p = _shapes(img, filters)
    pad = k // 2
    out = nl.ndarray((n_img, n_ct * p, 1, width), dtype=img.dtype, buffer=nl.hbm)
    for n in nl.affine_range(n_img):
        for ct in nl.affine_range(n_ct):
            img_t = nl.zeros((p, width + 2 * pad), dtype=img.dtype, buffer=nl.sbuf)
            filt_t = nl.ndarray((p, k), dtype=filters.dtype, buffer=nl.sbuf)
            out_t = nl.ndarray((p, width), dtype=img.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=img_t[:, pad:pad + width], src=img[n, ct * p:(ct + 1) * p, 0, :])
            nisa.dma_copy(dst=filt_t, src=filters[ct * p:(ct + 1) * p, 0, 0, :])
            for w in nl.affine_range(width):
                prod = nl.multiply(img_t[:, w:w + k], filt_t)
                out_t[:, w:w + 1] = nl.sum(prod, axis=1, keepdims=True)
            nl.store(out[n, ct * p:(ct + 1) * p, 0, :], out_t)
    return out


@nki.jit
def step4(img, filters):
    n_img, n_ct, width, k, p = _shapes(img, filters)
    pad = k // 2
    blk = min(width, nl.tile_size.psum_fmax)
    assert width % blk == 0
    out = nl.ndarray((n_img, n_ct * p, 1, width), dtype=img.dtype, buffer=nl.hbm)
    for n in nl.affine_range(n_img):
        for ct in nl.affine_range(n_ct):
            img_t = nl.zeros((p, width + 2 * pad), dtype=img.dtype, buffer=nl.sbuf)
            filt_t = nl.ndarray((p, k), dtype=filters.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=img_t[:, pad:pad + width], src=img[n, ct * p:(ct + 1) * p, 0, :])
            nisa.dma_copy(dst=filt_t, src=filters[ct * p:(ct + 1) * p, 0, 0, :])
            for b in nl.affine_range(width // blk):
                acc = nl.ndarray((p, blk), dtype=nl.float32, buffer=nl.psum)
                for f in nl.affine_range(blk):
                    w = b * blk + f
                    prod = nl.multiply(img_t[:, w:w + k], filt_t)
                    acc[:, f:f + 1] = nl.sum(prod, axis=1, keepdims=True)
                res = nisa.tensor_copy(acc, dtype=img.dtype)
                nl.store(out[n, ct * p:(ct + 1) * p, 0, b * blk:(b + 1) * blk], res)
    return out


def _filters_outside(img, filters, sub: int):
    """Steps 5 and 6: channel tile outside, filters copied into PSUM once per channel tile; ``sub`` > 0 splits
    the width loop into blocks of ``sub`` columns (step 6)."""
    n_img, n_ct, width, k, p = _shapes(img, filters)
    pad = k // 2
    out = nl.ndarray((n_img, n_ct * p, 1, width), dtype=img.dtype, buffer=nl.hbm)
    for ct in nl.affine_range(n_ct):
        filt_sb = nl.load(filters[ct * p:(ct + 1) * p, 0, 0, :])
        filt_ps = nl.ndarray((p, k), dtype=nl.float32, buffer=nl.psum)
        filt_ps[...] = nisa.tensor_copy(filt_sb, dtype=nl.float32)
        for n in nl.affine_range(n_img):
            img_t = nl.zeros((p, width + 2 * pad), dtype=img.dtype, buffer=nl.sbuf)
            img_t[:, pad:pad + width] = nl.load(img[n, ct * p:(ct + 1) * p, 0, :])
            out_t = nl.ndarray((p, width), dtype=img.dtype, buffer=nl.sbuf)
            if sub:
                assert width % sub == 0
                for wo in nl.affine_range(width // sub):
                    for wi in nl.affine_range(sub):
                        w = wo * sub + wi
                        prod = nl.multiply(img_t[:, w:w + k], filt_ps)
                        out_t[:, w:w + 1] = nl.sum(prod, axis=1, keepdims=True)
            else:
                for w in nl.affine_range(width):
                    prod = nl.multiply(img_t[:, w:w + k], filt_ps)
                    out_t[:, w:w + 1] = nl.sum(prod, axis=1, keepdims=True)
            nl.store(out[n, ct * p:(ct + 1) * p, 0, :], out_t)
    return out


@nki.jit
def step5(img, filters):
    return _filters_outside(img, filters, 0)


@nki.jit
def step6(img, filters):
    return _filters_outside(img, filters, 64)


@nki.jit
def step6_as_compiled(img, filters):
    """Step 6 as the seed's profile shows the compiler ran it (512 ``tensor_tensor`` + 512 ``tensor_reduce``): each
    group of 128 output columns one multiply of the ``[128, 128, K]`` window view by the PSUM filters broadcast over
    the columns, and one sum over the taps.  Same values as step 6; not a calibration row: it shows that the
    model's 18.7x on step 6 is the compiler's loop vectorisation, which nkisim does not do (nkisim/perf/MODEL.md,
    issue 33)."""
    n_img, n_ct, width, k, p = _shapes(img, filters)
    pad = k // 2
    g = 128
    assert width % g == 0
    out = nl.ndarray((n_img, n_ct * p, 1, width), dtype=img.dtype, buffer=nl.hbm)
    i_p = nl.arange(p)[:, None, None]
    i_w = nl.arange(g)[None, :, None]
    i_k = nl.arange(k)[None, None, :]
    for ct in nl.affine_range(n_ct):
        filt_sb = nl.load(filters[ct * p:(ct + 1) * p, 0, 0, :])
        filt_ps = nl.ndarray((p, k), dtype=nl.float32, buffer=nl.psum)
        filt_ps[...] = nisa.tensor_copy(filt_sb, dtype=nl.float32)
        for n in nl.affine_range(n_img):
            img_t = nl.zeros((p, width + 2 * pad), dtype=img.dtype, buffer=nl.sbuf)
            img_t[:, pad:pad + width] = nl.load(img[n, ct * p:(ct + 1) * p, 0, :])
            out_t = nl.ndarray((p, width), dtype=img.dtype, buffer=nl.sbuf)
            for b in nl.affine_range(width // g):
                prod = nl.multiply(img_t[i_p, b * g + i_w + i_k], filt_ps[i_p, i_k])
                out_t[:, b * g:(b + 1) * g] = nl.sum(prod, axis=2)
            nl.store(out[n, ct * p:(ct + 1) * p, 0, :], out_t)
    return out


STEPS = (step0, step1, step2, step3, step4, step5, step6)
"""In seed order; index = step number."""
