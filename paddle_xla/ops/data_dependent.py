"""Ops with no lowering on purpose: how many values they return depends on the input's values, and
XLA compiles for shapes known before a call. Each is declared here with a reason and a way round it
(`declare(..., data_dependent=...)`), shown by `check` and the UnsupportedOpsError instead of a bare
"no lowering".

(nonzero is lowered for a constant condition and refused, with the same kind of hint, otherwise.)"""

from __future__ import annotations

from .registry import declare, declared, properties

_WHY = "returns as many values as the input's values decide, and XLA compiles for sizes known before the call"

declare(
    "pd_op.nms",
    where=__name__,
    data_dependent=(
        "paddle.vision.ops.nms keeps as many boxes as survive. Return the boxes and scores from the model and "
        "run NMS on its outputs, or use a padded NMS that paddle_xla lowers: paddle.vision.ops.matrix_nms, or "
        "PaddleDetection's multiclass_nms (pd_op.multiclass_nms3), both padded to keep_top_k rows with the "
        "valid count in rois_num"
    ),
)
declare(
    "pd_op.masked_select",
    where=__name__,
    data_dependent=(
        "x[mask] / paddle.masked_select keeps as many elements as the mask has True. Use paddle.where(mask, x, "
        "fill) or x * mask, which keep x's shape"
    ),
)
declare(
    "pd_op.unique",
    where=__name__,
    data_dependent=(
        "paddle.unique returns as many values as are distinct. Compute it outside the model, or count with a "
        "fixed-size one-hot / histogram of known length"
    ),
)
declare(
    "pd_op.unique_consecutive",
    where=__name__,
    data_dependent=("paddle.unique_consecutive returns as many runs as the values make. Compute it outside the model"),
)
declare(
    "pd_op.bincount",
    where=__name__,
    data_dependent=(
        "paddle.bincount returns max(x) + 1 counts. Use paddle.nn.functional.one_hot(x, n).sum(0) for a known n"
    ),
)


def data_dependent_ops() -> dict[str, str]:
    """{op name: its hint} for every op declared with a data_dependent refusal (a registry query)."""
    return {name: e.data_dependent for name, e in sorted(declared().items()) if e.data_dependent is not None}


def __getattr__(name):
    # NOTE: DATA_DEPENDENT, as this module kept it before the declarations moved to the registry;
    # computed when read, so that a declaration in any ops module counts.
    if name == "DATA_DEPENDENT":
        return data_dependent_ops()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def refusal(op_name: str) -> str | None:
    """The reason an op is refused and the way round it, or None when it is simply not lowered yet."""
    hint = properties(op_name).data_dependent
    return None if hint is None else f"no lowering: it {_WHY}. {hint}"
