"""NMS parity: multiclass_nms3 and matrix_nms against native Paddle.

Paddle returns a variable number of rows; paddle_xla returns a fixed number per image (valid rows first,
then padding) and the valid count per image. So the table harness does not fit: each case compares, per
image, paddle_xla's first count[i] rows with Paddle's rows for that image, and checks the padding.
Scores are random floats (no ties) and boxes are jittered copies of a few base boxes, so NMS suppresses.
"""
from dataclasses import dataclass

import numpy as np
import paddle
import pytest
from paddle.static import InputSpec

import paddle_xla
from paddle_xla import capture, x64
from paddle_xla.lower import lower


class MulticlassNMS(paddle.nn.Layer):
    def __init__(self, **attrs):
        super().__init__()
        self.attrs = attrs

    def forward(self, bboxes, scores):
        a = self.attrs
        return paddle._C_ops.multiclass_nms3(bboxes, scores, None, a["score_threshold"], a["nms_top_k"],
                                             a["keep_top_k"], a["nms_threshold"], a["normalized"], a["nms_eta"],
                                             a["background_label"])


class MatrixNMS(paddle.nn.Layer):
    def __init__(self, **attrs):
        super().__init__()
        self.attrs = attrs

    def forward(self, bboxes, scores):
        out, rois_num, index = paddle.vision.ops.matrix_nms(bboxes, scores, return_index=True,
                                                            return_rois_num=True, **self.attrs)
        return out, index, rois_num


@dataclass(frozen=True)
class NMSCase:
    id: str
    attrs: dict
    n: int = 3                      # images
    m: int = 40                     # boxes per image
    c: int = 4                      # classes
    pixels: bool = False            # box corners in pixels (0..100) rather than normalized (0..1)
    dtype: str = "float32"
    quiet: tuple = ()               # images whose scores are scaled down below any threshold
    seed: int = 0


def _inputs(case: NMSCase):
    """Boxes: jittered copies of a few base boxes (so NMS suppresses); scores: uniform, no ties."""
    rng = np.random.default_rng(case.seed)
    scale = 100.0 if case.pixels else 1.0
    base_xy = rng.uniform(0.0, 0.6, (case.n, 5, 2))
    base_wh = rng.uniform(0.1, 0.4, (case.n, 5, 2))
    pick = rng.integers(0, 5, (case.n, case.m))
    xy = np.take_along_axis(base_xy, pick[..., None], 1) + rng.normal(0, 0.03, (case.n, case.m, 2))
    wh = np.take_along_axis(base_wh, pick[..., None], 1) * rng.uniform(0.8, 1.2, (case.n, case.m, 2))
    boxes = (np.concatenate([xy, xy + wh], -1) * scale).astype(case.dtype)
    scores = rng.uniform(0, 1, (case.n, case.c, case.m)).astype(case.dtype)
    for i in case.quiet:
        scores[i] *= 0.01
    return boxes, scores


def _specs(case):
    return [InputSpec([case.n, case.m, 4], case.dtype, "bboxes"),
            InputSpec([case.n, case.c, case.m], case.dtype, "scores")]


def _rows(case):
    k = case.attrs["keep_top_k"]
    if k > -1:
        return k
    top = case.attrs["nms_top_k"]
    return case.c * (case.m if top < 0 else min(top, case.m))


def _assert_matches(case, got, want):
    out_w, idx_w, num_w = (np.asarray(w.numpy()) for w in want)
    out_g, idx_g, num_g = (np.asarray(g) for g in got)
    rows = _rows(case)
    assert out_g.shape == (case.n * rows, 6) and idx_g.shape == (case.n * rows, 1) and num_g.shape == (case.n,)
    assert out_g.dtype == out_w.dtype and idx_g.dtype == idx_w.dtype == np.int32 and num_g.dtype == np.int32
    np.testing.assert_array_equal(num_g, num_w, err_msg=f"{case.id}: detections per image")
    starts = np.concatenate([[0], np.cumsum(num_w)])
    out_g, idx_g = out_g.reshape(case.n, rows, 6), idx_g.reshape(case.n, rows)
    for i in range(case.n):
        k, want_rows = num_w[i], out_w[starts[i]:starts[i + 1]]
        msg = f"{case.id}: image {i}"
        np.testing.assert_array_equal(out_g[i, :k, 0], want_rows[:, 0], err_msg=f"{msg} labels")
        np.testing.assert_allclose(out_g[i, :k, 1:], want_rows[:, 1:], rtol=1e-6,
                                   err_msg=f"{msg} scores, boxes")
        np.testing.assert_array_equal(idx_g[i, :k], idx_w[starts[i]:starts[i + 1], 0], err_msg=f"{msg} index")
        assert (out_g[i, k:, 0] == -1).all() and (out_g[i, k:, 1:] == 0).all(), f"{msg}: padding rows"
        assert (idx_g[i, k:] == -1).all(), f"{msg}: padding index"


MULTICLASS = [
    NMSCase("all_classes", dict(score_threshold=0.05, nms_top_k=-1, keep_top_k=-1, nms_threshold=0.5,
                                normalized=True, nms_eta=1.0, background_label=-1)),
    NMSCase("background_0_keep_top_k", dict(score_threshold=0.05, nms_top_k=-1, keep_top_k=10,
                                            nms_threshold=0.4, normalized=True, nms_eta=1.0, background_label=0)),
    NMSCase("nms_top_k", dict(score_threshold=0.01, nms_top_k=6, keep_top_k=100, nms_threshold=0.3,
                              normalized=True, nms_eta=1.0, background_label=-1)),
    NMSCase("pixels", dict(score_threshold=0.1, nms_top_k=20, keep_top_k=25, nms_threshold=0.45,
                           normalized=False, nms_eta=1.0, background_label=-1), pixels=True),
    NMSCase("empty_image", dict(score_threshold=0.2, nms_top_k=-1, keep_top_k=15, nms_threshold=0.5,
                                normalized=True, nms_eta=1.0, background_label=1), quiet=(1,)),
    NMSCase("all_empty", dict(score_threshold=0.5, nms_top_k=-1, keep_top_k=8, nms_threshold=0.5,
                              normalized=True, nms_eta=1.0, background_label=-1), n=2, quiet=(0, 1)),
    NMSCase("adaptive_eta", dict(score_threshold=0.05, nms_top_k=-1, keep_top_k=-1, nms_threshold=0.8,
                                 normalized=True, nms_eta=0.9, background_label=-1), seed=1),
    NMSCase("float64_pixels", dict(score_threshold=0.05, nms_top_k=30, keep_top_k=40, nms_threshold=0.6,
                                   normalized=False, nms_eta=0.95, background_label=0), pixels=True,
            dtype="float64", seed=2),
    NMSCase("one_image_many_boxes", dict(score_threshold=0.3, nms_top_k=100, keep_top_k=50, nms_threshold=0.35,
                                         normalized=True, nms_eta=1.0, background_label=-1), n=1, m=300, c=6,
            seed=3),
    # NOTE: a PP-YOLOE-like head: many boxes, 80 classes, nms_top_k 1000, keep_top_k 100.
    NMSCase("detector_sized", dict(score_threshold=0.6, nms_top_k=1000, keep_top_k=100, nms_threshold=0.7,
                                   normalized=False, nms_eta=1.0, background_label=-1), n=2, m=2100, c=80,
            pixels=True, seed=4),
]

MATRIX = [
    NMSCase("matrix_linear", dict(score_threshold=0.05, post_threshold=0.1, nms_top_k=-1, keep_top_k=-1,
                                  background_label=-1)),
    NMSCase("matrix_gaussian_keep_top_k", dict(score_threshold=0.05, post_threshold=0.05, nms_top_k=-1,
                                               keep_top_k=12, use_gaussian=True, gaussian_sigma=2.0,
                                               background_label=0)),
    NMSCase("matrix_nms_top_k_pixels", dict(score_threshold=0.1, post_threshold=0.2, nms_top_k=8,
                                            keep_top_k=100, normalized=False, background_label=-1),
            pixels=True, seed=1),
    NMSCase("matrix_empty_image", dict(score_threshold=0.2, post_threshold=0.1, nms_top_k=-1, keep_top_k=10,
                                       background_label=-1), quiet=(2,), seed=2),
]


def _run(layer, case, jit=True):
    boxes, scores = _inputs(case)
    want = layer(paddle.to_tensor(boxes), paddle.to_tensor(scores))
    if jit:
        got = paddle_xla.compile(layer, _specs(case))(boxes, scores)
    else:
        got = _run_eager(layer, case, boxes, scores)
    _assert_matches(case, got, want)


@x64.enabled
def _run_eager(layer, case, boxes, scores):
    graph = capture.from_layer(layer, _specs(case)).graph
    outs, _ = lower(graph)({}, {}, {"bboxes": boxes, "scores": scores})
    return list(outs)


@pytest.mark.parametrize("case", MULTICLASS, ids=[c.id for c in MULTICLASS])
def test_multiclass_nms3(case):
    _run(MulticlassNMS(**case.attrs), case)


@pytest.mark.parametrize("case", MATRIX, ids=[c.id for c in MATRIX])
def test_matrix_nms(case):
    _run(MatrixNMS(**case.attrs), case)


@pytest.mark.parametrize("layer, case", [(MulticlassNMS, MULTICLASS[1]), (MatrixNMS, MATRIX[1])],
                         ids=["multiclass_nms3", "matrix_nms"])
def test_nms_without_jit(layer, case):
    _run(layer(**case.attrs), case, jit=False)


def test_multiclass_nms3_in_graph():
    case = MULTICLASS[0]
    graph = capture.from_layer(MulticlassNMS(**case.attrs), _specs(case)).graph
    assert "pd_op.multiclass_nms3" in graph.op_names()
