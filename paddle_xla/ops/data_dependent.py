"""Ops with no lowering on purpose: how many values they return depends on the input's values, and
XLA compiles for shapes known before a call. Each gets a reason and a way round it in `check` and in
the UnsupportedOpsError, instead of a bare "no lowering".

(nonzero is lowered for a constant condition and refused, with the same kind of hint, otherwise.)"""
from __future__ import annotations

_WHY = "returns as many values as the input's values decide, and XLA compiles for sizes known before the call"

DATA_DEPENDENT: dict[str, str] = {
    "pd_op.nms": (
        "paddle.vision.ops.nms keeps as many boxes as survive. Return the boxes and scores from the model and "
        "run NMS on its outputs, or use a padded NMS that paddle_xla lowers: paddle.vision.ops.matrix_nms, or "
        "PaddleDetection's multiclass_nms (pd_op.multiclass_nms3), both padded to keep_top_k rows with the "
        "valid count in rois_num"),
    "pd_op.masked_select": (
        "x[mask] / paddle.masked_select keeps as many elements as the mask has True. Use paddle.where(mask, x, "
        "fill) or x * mask, which keep x's shape"),
    "pd_op.unique": (
        "paddle.unique returns as many values as are distinct. Compute it outside the model, or count with a "
        "fixed-size one-hot / histogram of known length"),
    "pd_op.unique_consecutive": (
        "paddle.unique_consecutive returns as many runs as the values make. Compute it outside the model"),
    "pd_op.bincount": (
        "paddle.bincount returns max(x) + 1 counts. Use paddle.nn.functional.one_hot(x, n).sum(0) for a known n"),
}


def refusal(op_name: str) -> str | None:
    """The reason an op is refused and the way round it, or None when it is simply not lowered yet."""
    hint = DATA_DEPENDENT.get(op_name)
    return None if hint is None else f"no lowering: it {_WHY}. {hint}"
