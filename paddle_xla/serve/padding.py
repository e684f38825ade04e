"""Padding requests into one call and cutting each request's own answer back out.

  pad_to_buckets  a request's bucketed dimensions (sequence lengths) padded with zeros up to the
                  nearest --seq-buckets value; its own lengths are kept to slice the outputs back
  group_of        requests may share a call only when their non-batch shapes agree after that
  stack           the rows of several requests, then copies of the last row up to a padded batch
                  size: a real row keeps padding numerically tame (no all-zero rows to normalize)
  unstack         each request's rows of each output, its bucketed dimensions sliced back

Zeros past a sequence's end change a model's answer unless it masks them (an attention mask, as
BERT's), which is why buckets are opt-in."""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence

import numpy as np

from .layout import BatchLayout


def pad_to_buckets(
    arrays: Mapping[str, np.ndarray], layout: BatchLayout, buckets: Sequence[int]
) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """(padded arrays, {symbol: the request's own size}). A length past the largest bucket stays as
    it is (compiled when first seen)."""
    if not buckets or not layout.buckets:
        return dict(arrays), {}
    lengths = {}
    for name, dims in layout.inputs.items():
        for axis, dim in enumerate(dims):
            if dim in layout.buckets:
                lengths[dim] = arrays[name].shape[axis]
    target = {s: bucket_for(n, buckets) for s, n in lengths.items()}
    padded = {}
    for name, array in arrays.items():
        widths = [(0, target[d] - n if d in target else 0) for d, n in zip(layout.inputs[name], array.shape)]
        padded[name] = np.pad(array, widths) if any(w for _, w in widths) else array
    return padded, lengths


def bucket_for(length: int, buckets: Sequence[int]) -> int:
    i = bisect.bisect_left(buckets, length)
    return buckets[i] if i < len(buckets) else length


def padded_size(rows: int, sizes: Sequence[int]) -> int:
    """The smallest of `sizes` that holds `rows` (the sizes end at --max-batch-size, which bounds rows)."""
    return sizes[bisect.bisect_left(sizes, rows)]


def group_of(arrays: Mapping[str, np.ndarray]) -> tuple:
    # NOTE: by name, not in the order a client sent the inputs: the same shapes are one group (and one plan)
    return tuple(sorted((name, array.shape[1:]) for name, array in arrays.items()))


def stack(requests: Sequence[Mapping[str, np.ndarray]], size: int) -> dict[str, np.ndarray]:
    """One feed per input: the requests' rows in order, then the last row repeated up to `size`."""
    out = {}
    for name in requests[0]:
        parts = [r[name] for r in requests]
        rows = sum(len(p) for p in parts)
        if size > rows:
            parts.append(np.repeat(parts[-1][-1:], size - rows, axis=0))
        out[name] = parts[0] if len(parts) == 1 else np.concatenate(parts)
    return out


def unstack(
    outputs: Mapping[str, np.ndarray], rows: Sequence[int], lengths: Sequence[Mapping[str, int]], layout: BatchLayout
) -> list[dict[str, np.ndarray]]:
    """Each request's own outputs: its rows, and its own size in every bucketed dimension."""
    answers, start = [], 0
    for n, own in zip(rows, lengths):
        answer = {}
        for name, array in outputs.items():
            index = [slice(start, start + n)]
            dims = layout.outputs[name][1:] if own and layout.outputs is not None else ()
            index += [slice(0, own[d]) if isinstance(d, str) and d in own else slice(None) for d in dims]
            answer[name] = array[tuple(index)]
        answers.append(answer)
        start += n
    return answers
