"""Lazy view composition: the affine map from a view's positions onto its root tensor.

NKI views are access patterns: ``t[:, off:off + n]`` is not checked when it is written, only the access an
instruction finally makes is (slices of slices, integer indices of slices and index expressions on slices all
compose into one pattern over the tensor).  A :class:`Tensor` built by basic indexing keeps a NumPy view (the hot
path) plus its parent and index; the map below is computed from that chain only when a composition leaves the
intermediate view's extent or meets an index expression.

A map is ``(c, dims)``: ``c[k]`` is the root index on root axis ``k`` of the view's first element and ``dims[d] =
(k, s, n)`` says view axis ``d`` (length ``n``) walks root axis ``k`` with step ``s``.  Basic indexing keeps view
axes in root-axis order, one root axis each.
"""

from __future__ import annotations

import numpy as np

Map = tuple[tuple[int, ...], tuple[tuple[int, int, int], ...]]


def identity(shape: tuple[int, ...]) -> Map:
    return tuple(0 for _ in shape), tuple((k, 1, n) for k, n in enumerate(shape))


def norm_item(it, n: int):
    """A raw slice from the fast path -> explicit (start, stop, step); ints pass through."""
    if isinstance(it, slice):
        start = 0 if it.start is None else int(it.start)
        stop = n if it.stop is None else int(it.stop)
        step = 1 if it.step is None else int(it.step)
        return slice(start, stop, step)
    return int(it)


def compose(m: Map, idx: tuple) -> Map:
    """Apply normalized basic items (explicit slices, ints) to the view axes of ``m``; stops may run past the view."""
    c = list(m[0])
    dims = m[1]
    out = []
    d = 0
    for it in idx:
        k, s, n = dims[d]
        if isinstance(it, slice):
            it = norm_item(it, n)
            c[k] += s * it.start
            out.append((k, s * it.step, len(range(it.start, max(it.stop, it.start), it.step))))
        else:
            c[k] += s * int(it)
        d += 1
    out.extend(dims[d:])
    return tuple(c), tuple(out)


def in_bounds(m: Map, shape: tuple[int, ...]) -> bool:
    c, dims = m
    if any(n == 0 for _, _, n in dims):
        return True
    hi = list(c)
    for k, s, n in dims:
        hi[k] += s * (n - 1)
    return all(0 <= lo and h < size for lo, h, size in zip(c, hi, shape))


def basic_index(m: Map) -> tuple:
    """NumPy basic index of the root giving exactly the view (only for an in-bounds map)."""
    c, dims = m
    per_root: list = list(c)
    for k, s, n in dims:
        per_root[k] = slice(c[k], c[k] + s * (n - 1) + 1, s) if n else slice(c[k], c[k], 1)
    return tuple(per_root)


def arrays(m: Map) -> tuple[np.ndarray, ...]:
    """Root index arrays of every view position (one per root axis, broadcastable to the view shape)."""
    c, dims = m
    rank = len(dims)
    out = [np.asarray(ck, dtype=np.int64) for ck in c]
    for d, (k, s, n) in enumerate(dims):
        sh = [1] * rank
        sh[d] = n
        out[k] = out[k] + (s * np.arange(n, dtype=np.int64)).reshape(sh)
    return tuple(out)


def advanced(m: Map, items: list) -> tuple[np.ndarray, ...]:
    """Root index arrays when every view axis is indexed by an integer array (index expression) or an int."""
    c, dims = m
    out = [np.asarray(ck, dtype=np.int64) for ck in c]
    for (k, s, _), it in zip(dims, items):
        out[k] = out[k] + (it if s == 1 else s * it)
    return tuple(out)


def take(arrs: tuple[np.ndarray, ...], shape: tuple[int, ...], idx: tuple, name: str) -> tuple[np.ndarray, ...]:
    """Basic items applied to gather index arrays; positions past the view extend the pattern affinely."""
    cur = [np.broadcast_to(a, shape) for a in arrs]
    axis = 0
    for it in idx:
        n = cur[0].shape[axis] if cur else 0
        if isinstance(it, slice):
            pos = np.arange(it.start, max(it.stop, it.start), it.step, dtype=np.int64)
        else:
            pos = np.asarray([int(it)], dtype=np.int64)
        cur = [_take_axis(a, pos, axis, n, name) for a in cur]
        if isinstance(it, slice):
            axis += 1
        else:
            cur = [a.reshape(a.shape[:axis] + a.shape[axis + 1:]) for a in cur]
    return tuple(cur)


def _take_axis(a: np.ndarray, pos: np.ndarray, axis: int, n: int, name: str) -> np.ndarray:
    if pos.size == 0 or (pos.min() >= 0 and pos.max() < n):
        return np.take(a, pos, axis=axis)
    if n >= 2:
        first = np.take(a, [0], axis=axis)
        delta = np.take(a, [1], axis=axis) - first
        sh = [1] * a.ndim
        sh[axis] = n
        if np.array_equal(a, first + delta * np.arange(n).reshape(sh)):
            sh[axis] = pos.size
            return first + delta * pos.reshape(sh)
    raise IndexError(f"nkisim: a view of '{name}' built from index expressions is indexed outside its extent "
                     f"({int(pos.min())}..{int(pos.max())} of {n}) along an axis that is not affine; index the "
                     "tensor once with the full expressions instead")


def affine_fit(arrs: tuple[np.ndarray, ...], shape: tuple[int, ...], root_shape: tuple[int, ...]):
    """(c, steps) when index arrays address the root as an in-bounds strided pattern, else None.

    ``steps[k][d]`` is the root-axis-``k`` step of view axis ``d``.  Index expressions of this form (arange /
    mgrid / affine arithmetic on them) are the same access a slice makes, so they become the same strided view.
    """
    rank = len(shape)
    if not rank or any(n == 0 for n in shape):
        return None
    c = []
    steps = []
    for a, size in zip(arrs, root_shape):
        a = np.asarray(a)
        pad = rank - a.ndim
        if pad < 0:
            return None
        origin = int(a.reshape(-1)[0])
        row = [0] * rank
        fit = np.asarray(origin, dtype=np.int64)
        lo = hi = origin
        for d in range(a.ndim):
            n = a.shape[d]
            if n == 1:
                continue
            idx = [0] * a.ndim
            idx[d] = 1
            s = int(a[tuple(idx)]) - origin
            row[d + pad] = s
            sh = [1] * a.ndim
            sh[d] = n
            fit = fit + s * np.arange(n, dtype=np.int64).reshape(sh)
            span = s * (n - 1)
            lo, hi = lo + min(0, span), hi + max(0, span)
        if lo < 0 or hi >= size or not np.array_equal(np.broadcast_to(fit, a.shape), a):
            return None
        c.append(origin)
        steps.append(row)
    for d in range(rank):  # every real view axis must move through memory (no broadcast duplicates)
        if shape[d] > 1 and not any(row[d] for row in steps):
            return None
    return c, steps


def map_of_fit(c: list[int], steps: list[list[int]], shape: tuple[int, ...]) -> Map | None:
    """The lazy-view map of a fitted pattern when each view axis walks one root axis forward, in root order."""
    dims = []
    last = -1
    for d, n in enumerate(shape):
        ks = [k for k, row in enumerate(steps) if row[d]]
        if len(ks) != 1 or steps[ks[0]][d] < 0 or ks[0] <= last:
            return None
        last = ks[0]
        dims.append((ks[0], steps[ks[0]][d], n))
    return tuple(c), tuple(dims)
