import paddle
import paddle.nn.functional as F

from .harness import Arg, OpCase, Values

X = Arg((2, 8, 3, 4))
_SUM = dict(rtol=1e-5, atol=1e-5, reason="sums of random draws compared with their exact value")


def _drop(p, mode="upscale_in_train", training=False):
    return lambda x: F.dropout(x, p, training=training, mode=mode)


CASES = [
    # ---- embedding ----
    OpCase("embedding", lambda i, w: F.embedding(i, w), [Arg((2, 3), "int64", 0, 6), Arg((6, 4))], ["pd_op.embedding"]),
    OpCase(
        "embedding_padding_idx",
        lambda i, w: F.embedding(i, w, padding_idx=1),
        [Arg((3, 5), "int64", 0, 4), Arg((4, 3))],
        ["pd_op.embedding"],
    ),
    OpCase(
        "embedding_neg_padding_idx_int32",
        lambda i, w: F.embedding(i, w, padding_idx=-2),
        [Arg((3, 5), "int32", 0, 4), Arg((4, 3))],
        ["pd_op.embedding"],
    ),
    # NOTE: a sparse embedding's gradient is a SelectedRows (one row per id): values only.
    OpCase(
        "embedding_sparse",
        lambda i, w: F.embedding(i, w, padding_idx=0, sparse=True),
        [Arg((3, 5), "int64", 0, 4), Arg((4, 3))],
        ["pd_op.embedding"],
        grad=False,
    ),
    OpCase(
        "embedding_f64",
        lambda i, w: F.embedding(i, w),
        [Arg((4,), "int64", 0, 6), Arg((6, 4), "float64")],
        ["pd_op.embedding"],
    ),
    OpCase(
        "embedding_f16",
        lambda i, w: F.embedding(i, w),
        [Arg((4,), "int64", 0, 6), Arg((6, 4), "float16")],
        ["pd_op.embedding"],
        grad_rtol=1e-3,
        grad_atol=1e-3,
        reason="float16 gradient accumulation",
    ),
    OpCase(
        "embedding_bf16",
        lambda i, w: F.embedding(i, w),
        [Arg((4,), "int64", 0, 3), Arg((6, 4), "bfloat16")],
        ["pd_op.embedding"],
        grad_rtol=1e-2,
        grad_atol=1e-2,
        reason="bfloat16 gradient accumulation",
    ),
    # ---- dropout: inference exactly; training through what the mask cannot change ----
    OpCase("dropout_eval_upscale", _drop(0.3), [Arg((4, 5))], ["pd_op.dropout"]),
    OpCase("dropout_eval_downscale", _drop(0.3, "downscale_in_infer"), [Arg((4, 5))], ["pd_op.dropout"]),
    OpCase(
        "dropout_eval_downscale_f64", _drop(0.25, "downscale_in_infer"), [Arg((4, 5), "float64")], ["pd_op.dropout"]
    ),
    OpCase(
        "dropout_eval_p_tensor",
        lambda x, p: F.dropout(x, p, training=False, mode="downscale_in_infer"),
        [Arg((4, 5)), Arg((1,), low=0.1, high=0.9)],
        ["pd_op.dropout"],
    ),
    OpCase("dropout_train_p1", _drop(1.0, training=True), [Arg((4, 5))], ["pd_op.dropout"]),
    OpCase(
        "dropout_train_scale",
        lambda x: (lambda y: y * (y - 2.0))(F.dropout(x * 0 + 1, 0.5, training=True)),
        [Arg((64, 8))],
        ["pd_op.dropout"],
        grad=False,
    ),
    OpCase(
        "dropout_train_downscale_keeps_values",
        lambda x: (lambda y: y * (y - x))(F.dropout(x, 0.4, training=True, mode="downscale_in_infer")),
        [Arg((64, 8))],
        ["pd_op.dropout"],
        grad=False,
    ),
    # ---- softmax family ----
    OpCase("softmax", lambda x: F.softmax(x, axis=1), [Arg((3, 4, 5))], ["pd_op.softmax"]),
    OpCase("softmax_f64", lambda x: F.softmax(x), [Arg((3, 5), "float64")], ["pd_op.softmax"]),
    OpCase("log_softmax", lambda x: F.log_softmax(x, axis=0), [Arg((3, 4, 5))], ["pd_op.log_softmax"]),
    OpCase("log_softmax_f64", lambda x: F.log_softmax(x), [Arg((3, 5), "float64")], ["pd_op.log_softmax"]),
    OpCase(
        "gumbel_softmax_rows_sum_to_one",
        lambda x: paddle.sum(F.gumbel_softmax(x, temperature=0.5), axis=-1),
        [Arg((16, 5))],
        ["pd_op.gumbel_softmax"],
        **_SUM,
    ),
    OpCase(
        "gumbel_softmax_hard_is_one_hot",
        lambda x: paddle.sum(F.gumbel_softmax(x, hard=True) ** 2, axis=1),
        [Arg((16, 5))],
        ["pd_op.gumbel_softmax"],
        grad=False,
    ),
    # ---- shuffles ----
    OpCase("pixel_shuffle", lambda x: F.pixel_shuffle(x, 2), [X], ["pd_op.pixel_shuffle"]),
    OpCase(
        "pixel_shuffle_nhwc_f64",
        lambda x: F.pixel_shuffle(x, 2, data_format="NHWC"),
        [Arg((2, 3, 4, 8), "float64")],
        ["pd_op.pixel_shuffle"],
    ),
    OpCase("pixel_unshuffle", lambda x: F.pixel_unshuffle(x, 2), [Arg((2, 3, 4, 6))], ["pd_op.pixel_unshuffle"]),
    OpCase(
        "pixel_unshuffle_nhwc",
        lambda x: F.pixel_unshuffle(x, 2, data_format="NHWC"),
        [Arg((2, 4, 6, 3))],
        ["pd_op.pixel_unshuffle"],
    ),
    OpCase("channel_shuffle", lambda x: F.channel_shuffle(x, 4), [X], ["pd_op.channel_shuffle"]),
    OpCase(
        "channel_shuffle_nhwc_f64",
        lambda x: F.channel_shuffle(x, 3, data_format="NHWC"),
        [Arg((2, 3, 4, 6), "float64")],
        ["pd_op.channel_shuffle"],
    ),
    OpCase("temporal_shift", lambda x: F.temporal_shift(x, 3, 0.25), [Arg((6, 8, 2, 3))], ["pd_op.temporal_shift"]),
    OpCase(
        "temporal_shift_nhwc",
        lambda x: F.temporal_shift(x, 2, 0.2, data_format="NHWC"),
        [Arg((4, 2, 3, 10))],
        ["pd_op.temporal_shift"],
    ),
    # ---- im2col ----
    OpCase("unfold", lambda x: F.unfold(x, 2), [Arg((2, 3, 4, 5))], ["pd_op.unfold"]),
    OpCase(
        "unfold_all_attrs",
        lambda x: F.unfold(x, [2, 3], strides=[1, 2], paddings=[1, 0, 2, 1], dilations=[2, 1]),
        [Arg((2, 2, 6, 7))],
        ["pd_op.unfold"],
    ),
    OpCase(
        "unfold_f64", lambda x: F.unfold(x, 3, strides=2, paddings=1), [Arg((1, 2, 5, 5), "float64")], ["pd_op.unfold"]
    ),
    OpCase("fold", lambda x: F.fold(x, [4, 5], 2), [Arg((2, 12, 12))], ["pd_op.fold"]),
    OpCase(
        "fold_all_attrs",
        lambda x: F.fold(x, [6, 7], [2, 3], strides=[1, 2], paddings=[1, 0], dilations=[2, 1]),
        [Arg((2, 12, 18))],
        ["pd_op.fold"],
    ),
    OpCase(
        "fold_f64", lambda x: F.fold(x, [5, 5], 3, strides=2, paddings=1), [Arg((1, 18, 9), "float64")], ["pd_op.fold"]
    ),
    # ---- label smoothing ----
    OpCase(
        "label_smooth",
        lambda x: F.label_smooth(x, epsilon=0.1),
        [Arg((2, 3, 5), low=0, high=1)],
        ["pd_op.label_smooth"],
    ),
    OpCase(
        "label_smooth_prior_f64",
        lambda x, p: F.label_smooth(x, p, epsilon=0.2),
        [Arg((4, 5), "float64", 0, 1), Arg((1, 5), "float64", 0, 1)],
        ["pd_op.label_smooth"],
    ),
    # ---- bilinear ----
    OpCase(
        "bilinear",
        lambda x, y, w, b: F.bilinear(x, y, w, b),
        [Arg((4, 5)), Arg((4, 6)), Arg((3, 5, 6)), Arg((1, 3))],
        ["pd_op.bilinear"],
        rtol=1e-5,
        atol=1e-5,
        reason="30-term float32 sums in another order",
    ),
    OpCase(
        "bilinear_no_bias_f64",
        lambda x, y, w: F.bilinear(x, y, w),
        [Arg((4, 5), "float64"), Arg((4, 6), "float64"), Arg((3, 5, 6), "float64")],
        ["pd_op.bilinear"],
    ),
    # ---- attention: Paddle's CPU build decomposes it (transpose, matmul, softmax, ...), no fused op ----
    OpCase(
        "sdpa",
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
        [Arg((2, 5, 3, 8))] * 3,
        ["pd_op.softmax", "pd_op.matmul"],
        rtol=1e-5,
        atol=1e-5,
        reason="float32 attention sums",
    ),
    OpCase(
        "sdpa_mask",
        lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, m),
        [Arg((2, 5, 3, 8))] * 3 + [Arg((2, 3, 5, 5))],
        ["pd_op.softmax"],
        rtol=1e-5,
        atol=1e-5,
        reason="float32 attention sums",
    ),
    OpCase(
        "sdpa_causal",
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        [Arg((2, 5, 3, 8))] * 3,
        ["pd_op.softmax"],
        rtol=1e-5,
        atol=1e-5,
        reason="float32 attention sums",
    ),
]

# Refusals that became lowerings: Paddle's 0-d softmax is 1 and its log_softmax 0 (NaN included).
CASES += [
    OpCase("softmax_0d", lambda x: F.softmax(x), [Arg(())], ["pd_op.softmax"]),
    OpCase("log_softmax_0d", lambda x: F.log_softmax(x), [Arg(())], ["pd_op.log_softmax"]),
    OpCase("softmax_0d_nan", lambda x: F.softmax(x), [Values((), values=float("nan"))], ["pd_op.softmax"]),
]
