import paddle
import paddle.nn.functional as F

from .harness import Arg, OpCase, Values

_C = paddle._C_ops
CE = ["pd_op.cross_entropy_with_softmax"]
LOGITS = Arg((4, 5))
HARD = Arg((4, 1), "int64", 0, 5)
PROB = Arg((4, 5), low=0.05, high=0.95)
LABEL01 = Arg((4, 5), low=0.0, high=1.0)
# NOTE: labels that hit ignore_index=2 (rows 1 and 3) and miss it elsewhere: a lowering that ignored
# ignore_index would count those rows, and the cases would fail.
IGNORED = (0, 2, 4, 2, 1, 3)
HIT_2 = Values((6, 1), "int64", values=IGNORED)
HIT_2_FLAT = Values((6,), "int64", values=IGNORED)


def _ce(soft=False, use_softmax=True, ignore_index=-100, axis=-1):
    return lambda x, y: _C.cross_entropy_with_softmax(x, y, soft, use_softmax, True, ignore_index, axis)


CASES = [
    # ---- softmax cross entropy (outputs: softmax, loss) ----
    OpCase("ce_hard", _ce(), [LOGITS, HARD], CE),
    OpCase("ce_hard_ignore", _ce(ignore_index=2), [Arg((6, 5)), HIT_2], CE),
    OpCase(
        "ce_hard_ignore_mean_api",
        lambda x, y: F.cross_entropy(x, y, ignore_index=2, reduction="mean"),
        [Arg((6, 5)), HIT_2_FLAT],
        CE,
    ),
    OpCase(
        "ce_hard_ignore_sum_api",
        lambda x, y: F.cross_entropy(x, y, ignore_index=2, reduction="sum"),
        [Arg((6, 5)), HIT_2],
        CE,
    ),
    OpCase(
        "ce_hard_ignore_weighted_mean_api",
        lambda x, y, w: F.cross_entropy(x, y, weight=w, ignore_index=2, reduction="mean"),
        [Arg((6, 5)), HIT_2_FLAT, Arg((5,), low=0.5, high=1.5, grad=False)],
        CE,
    ),
    # NOTE: soft labels have no class index: ignore_index must change nothing
    OpCase(
        "ce_soft_ignore_index_unused", _ce(soft=True, ignore_index=2), [Arg((6, 5)), Arg((6, 5), low=0.0, high=0.4)], CE
    ),
    OpCase("ce_soft", _ce(soft=True), [LOGITS, Arg((4, 5), low=0.0, high=0.4)], CE),
    OpCase("ce_axis1", _ce(axis=1), [Arg((3, 5, 4)), Arg((3, 1, 4), "int64", 0, 5)], CE),
    OpCase("ce_no_softmax", _ce(use_softmax=False), [PROB, HARD], CE),
    OpCase("ce_soft_no_softmax", _ce(soft=True, use_softmax=False), [PROB, Arg((4, 5), low=0.0, high=0.4)], CE),
    OpCase("ce_f64_int32_label", _ce(), [Arg((4, 5), "float64"), Arg((4, 1), "int32", 0, 5)], CE),
    OpCase(
        "cross_entropy_api", lambda x, y: F.cross_entropy(x, y, reduction="sum"), [LOGITS, Arg((4,), "int64", 0, 5)], CE
    ),
    OpCase(
        "cross_entropy_label_smoothing",
        lambda x, y: F.cross_entropy(x, y, label_smoothing=0.1),
        [LOGITS, Arg((4,), "int64", 0, 5)],
        CE + ["pd_op.label_smooth"],
    ),
    # ---- nll ----
    OpCase(
        "nll_loss_mean",
        lambda x, y: _C.nll_loss(x, y, None, -100, "mean"),
        [LOGITS, Arg((4,), "int64", 0, 5)],
        ["pd_op.nll_loss"],
    ),
    OpCase(
        "nll_loss_weight_ignore_sum",
        lambda x, y, w: _C.nll_loss(x, y, w, 2, "sum"),
        [Arg((6, 5)), HIT_2_FLAT, Arg((5,), low=0.5, high=1.5)],
        ["pd_op.nll_loss"],
    ),
    OpCase(
        "nll_loss_ignore_mean",
        lambda x, y: _C.nll_loss(x, y, None, 2, "mean"),
        [Arg((6, 5)), HIT_2_FLAT],
        ["pd_op.nll_loss"],
    ),
    OpCase(
        "nll_loss_weight_ignore_mean",
        lambda x, y, w: _C.nll_loss(x, y, w, 2, "mean"),
        [Arg((6, 5)), HIT_2_FLAT, Arg((5,), low=0.5, high=1.5)],
        ["pd_op.nll_loss"],
    ),
    OpCase(
        "nll_loss_none_4d",
        lambda x, y, w: _C.nll_loss(x, y, w, 1, "none"),
        [Arg((2, 5, 3, 2)), Arg((2, 3, 2), "int64", 0, 5), Arg((5,), low=0.5, high=1.5)],
        ["pd_op.nll_loss"],
        outputs=[0],
    ),
    # every label ignored: Paddle's mean skips the division by a zero total weight and gives 0
    OpCase(
        "nll_loss_mean_all_ignored",
        lambda x, y: F.nll_loss(x, y, ignore_index=0),
        [Arg((4, 5)), Values((4,), "int64", values=(0, 0, 0, 0))],
        ["pd_op.nll_loss"],
    ),
    # NOTE: no 4-D all-ignored case: Paddle 3.3's CPU kernel hangs or aborts (heap corruption) on it.
    OpCase(
        "nll_loss_api_3d_f64",
        lambda x, y: F.nll_loss(x, y),
        [Arg((4, 5, 3), "float64"), Arg((4, 3), "int64", 0, 5)],
        ["pd_op.nll_loss"],
    ),
    # ---- binary ----
    OpCase("bce_loss", lambda x, y: _C.bce_loss(x, y), [PROB, LABEL01], ["pd_op.bce_loss"]),
    OpCase(
        "bce_loss_f64",
        lambda x, y: F.binary_cross_entropy(x, y, reduction="sum"),
        [Arg((3, 4), "float64", 0.05, 0.95), Arg((3, 4), "float64", 0.0, 1.0)],
        ["pd_op.bce_loss"],
    ),
    OpCase(
        "sigmoid_ce",
        lambda x, y: _C.sigmoid_cross_entropy_with_logits(x, y, None, False, -100),
        [Arg((4, 5), low=-4, high=4), LABEL01],
        ["pd_op.sigmoid_cross_entropy_with_logits"],
    ),
    OpCase(
        "sigmoid_ce_pos_weight",
        lambda x, y, w: _C.sigmoid_cross_entropy_with_logits(x, y, w, False, -100),
        [Arg((4, 5), low=-4, high=4), LABEL01, Arg((4, 5), low=0.5, high=2.0)],
        ["pd_op.sigmoid_cross_entropy_with_logits"],
    ),
    OpCase(
        "sigmoid_ce_normalize_ignore",
        lambda x, y: _C.sigmoid_cross_entropy_with_logits(
            x, paddle.where(y > 0.7, paddle.full_like(y, -1.0), y), None, True, -1
        ),
        [Arg((4, 5), low=-4, high=4), LABEL01],
        ["pd_op.sigmoid_cross_entropy_with_logits"],
    ),
    OpCase(
        "bce_with_logits_api_f64",
        lambda x, y, w: F.binary_cross_entropy_with_logits(x, y, pos_weight=w),
        [Arg((4, 5), "float64", -4, 4), Arg((4, 5), "float64", 0, 1), Arg((5,), "float64", 0.5, 2.0)],
        ["pd_op.sigmoid_cross_entropy_with_logits"],
    ),
    # ---- regression / divergence ----
    OpCase("huber_loss", lambda x, y: _C.huber_loss(x, y, 0.7), [Arg((4, 5)), Arg((4, 5))], ["pd_op.huber_loss"]),
    OpCase(
        "smooth_l1_f64",
        lambda x, y: F.smooth_l1_loss(x, y, reduction="sum", delta=0.5),
        [Arg((4, 5), "float64"), Arg((4, 5), "float64")],
        ["pd_op.huber_loss"],
    ),
    OpCase(
        "kldiv_none",
        lambda x, y: _C.kldiv_loss(x, y, "none", False),
        [Arg((4, 5)), Arg((4, 5), low=0, high=1)],
        ["pd_op.kldiv_loss"],
    ),
    OpCase(
        "kldiv_batchmean",
        lambda x, y: _C.kldiv_loss(x, y, "batchmean", False),
        [Arg((4, 5)), Arg((4, 5), low=0, high=1)],
        ["pd_op.kldiv_loss"],
    ),
    OpCase(
        "kldiv_sum_log_target",
        lambda x, y: _C.kldiv_loss(x, y, "sum", True),
        [Arg((4, 5)), Arg((4, 5))],
        ["pd_op.kldiv_loss"],
    ),
    OpCase(
        "kldiv_mean_f64",
        lambda x, y: _C.kldiv_loss(x, y, "mean", False),
        [Arg((4, 5), "float64"), Arg((4, 5), "float64", 0, 1)],
        ["pd_op.kldiv_loss"],
    ),
    OpCase(
        "log_loss",
        lambda x, y: F.log_loss(x, y),
        [Arg((4, 1), low=0.05, high=0.95), Arg((4, 1), low=0, high=1)],
        ["pd_op.log_loss"],
    ),
    OpCase("identity_loss_mean", lambda x: paddle.incubate.identity_loss(x, 1), [Arg((4, 5))], ["pd_op.identity_loss"]),
    OpCase("identity_loss_sum", lambda x: paddle.incubate.identity_loss(x, 0), [Arg((4, 5))], ["pd_op.identity_loss"]),
    OpCase("identity_loss_none", lambda x: paddle.incubate.identity_loss(x, 2), [Arg((4, 5))], ["pd_op.identity_loss"]),
    # ---- CTC ----
    OpCase(
        "warpctc",
        lambda x, y, a, b: _C.warpctc(x, y, a, b, 0, False),
        [Arg((10, 3, 6)), Arg((3, 4), "int32", 1, 6), Arg((3,), "int64", 8, 11), Arg((3,), "int64", 1, 5)],
        ["pd_op.warpctc"],
        outputs=[0],
        rtol=1e-5,
        atol=1e-5,
        reason="log-space recursion over 10 steps",
    ),
    OpCase(
        "warpctc_norm_by_times_blank",
        lambda x, y, a, b: _C.warpctc(x, y, a, b, 5, True),
        [Arg((12, 2, 6)), Arg((2, 3), "int32", 0, 5), Arg((2,), "int64", 9, 13), Arg((2,), "int64", 0, 4)],
        ["pd_op.warpctc"],
        outputs=[0],
        rtol=1e-5,
        atol=1e-5,
        reason="log-space recursion over 12 steps",
    ),
    OpCase(
        "ctc_loss_api_f64",
        lambda x, y, a, b: F.ctc_loss(x, y, a, b, reduction="mean"),
        [Arg((10, 3, 6), "float64"), Arg((3, 4), "int32", 1, 6), Arg((3,), "int64", 8, 11), Arg((3,), "int64", 1, 5)],
        ["pd_op.warpctc"],
    ),
]

# Attributes no other case sets to a non-default value (test_attribute_coverage.py).
CASES += [
    OpCase(
        "ce_with_softmax_not_numeric_stable",
        lambda x, y: _C.cross_entropy_with_softmax(x, y, False, True, False, -100, -1),
        [Arg((6, 5)), Arg((6, 1), "int64", 0, 5)],
        ["pd_op.cross_entropy_with_softmax"],
    ),
]
