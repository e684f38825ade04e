"""Parity of the detection ops with variable-size outputs against native Paddle: multiclass_nms3 (both forms),
matrix_nms, generate_proposals and distribute_fpn_proposals.

Paddle returns a variable number of rows; paddle_xla returns a fixed number (valid rows first, then padding)
and the valid counts. So the table harness does not fit: each case compares, per image (or FPN level),
paddle_xla's valid rows with Paddle's rows, and checks the padding. Scores are random floats (no ties) and
boxes are jittered copies of a few base boxes, so NMS suppresses.
"""

from dataclasses import dataclass, field

import numpy as np
import paddle
import pytest
from paddle.static import InputSpec

import paddle_xla
from paddle_xla import capture, x64
from paddle_xla.lowering.lower import lower


class MulticlassNMS(paddle.nn.Layer):
    def __init__(self, **attrs):
        super().__init__()
        self.attrs = attrs

    def forward(self, bboxes, scores):
        a = self.attrs
        return paddle._C_ops.multiclass_nms3(
            bboxes,
            scores,
            None,
            a["score_threshold"],
            a["nms_top_k"],
            a["keep_top_k"],
            a["nms_threshold"],
            a["normalized"],
            a["nms_eta"],
            a["background_label"],
        )


class MatrixNMS(paddle.nn.Layer):
    def __init__(self, **attrs):
        super().__init__()
        self.attrs = attrs

    def forward(self, bboxes, scores):
        out, rois_num, index = paddle.vision.ops.matrix_nms(
            bboxes, scores, return_index=True, return_rois_num=True, **self.attrs
        )
        return out, index, rois_num


@dataclass(frozen=True)
class NMSCase:
    id: str
    attrs: dict
    n: int = 3  # images
    m: int = 40  # boxes per image
    c: int = 4  # classes
    pixels: bool = False  # box corners in pixels (0..100) rather than normalized (0..1)
    dtype: str = "float32"
    quiet: tuple = ()  # images whose scores are scaled down below any threshold
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
    return [
        InputSpec([case.n, case.m, 4], case.dtype, "bboxes"),
        InputSpec([case.n, case.c, case.m], case.dtype, "scores"),
    ]


def _rows(case):
    k = case.attrs["keep_top_k"]
    if k > -1:
        return k
    top = case.attrs["nms_top_k"]
    return case.c * (case.m if top < 0 else min(top, case.m))


def _assert_matches(case, got, want, rows=None):
    out_w, idx_w, num_w = (np.asarray(w.numpy()) for w in want)
    out_g, idx_g, num_g = (np.asarray(g) for g in got)
    rows = _rows(case) if rows is None else rows
    assert out_g.shape == (case.n * rows, 6) and idx_g.shape == (case.n * rows, 1) and num_g.shape == (case.n,)
    assert out_g.dtype == out_w.dtype and idx_g.dtype == idx_w.dtype == np.int32 and num_g.dtype == np.int32
    np.testing.assert_array_equal(num_g, num_w, err_msg=f"{case.id}: detections per image")
    starts = np.concatenate([[0], np.cumsum(num_w)])
    out_g, idx_g = out_g.reshape(case.n, rows, 6), idx_g.reshape(case.n, rows)
    for i in range(case.n):
        k, want_rows = num_w[i], out_w[starts[i] : starts[i + 1]]
        msg = f"{case.id}: image {i}"
        np.testing.assert_array_equal(out_g[i, :k, 0], want_rows[:, 0], err_msg=f"{msg} labels")
        np.testing.assert_allclose(out_g[i, :k, 1:], want_rows[:, 1:], rtol=1e-6, err_msg=f"{msg} scores, boxes")
        np.testing.assert_array_equal(idx_g[i, :k], idx_w[starts[i] : starts[i + 1], 0], err_msg=f"{msg} index")
        assert (out_g[i, k:, 0] == -1).all() and (out_g[i, k:, 1:] == 0).all(), f"{msg}: padding rows"
        assert (idx_g[i, k:] == -1).all(), f"{msg}: padding index"


MULTICLASS = [
    NMSCase(
        "all_classes",
        dict(
            score_threshold=0.05,
            nms_top_k=-1,
            keep_top_k=-1,
            nms_threshold=0.5,
            normalized=True,
            nms_eta=1.0,
            background_label=-1,
        ),
    ),
    NMSCase(
        "background_0_keep_top_k",
        dict(
            score_threshold=0.05,
            nms_top_k=-1,
            keep_top_k=10,
            nms_threshold=0.4,
            normalized=True,
            nms_eta=1.0,
            background_label=0,
        ),
    ),
    NMSCase(
        "nms_top_k",
        dict(
            score_threshold=0.01,
            nms_top_k=6,
            keep_top_k=100,
            nms_threshold=0.3,
            normalized=True,
            nms_eta=1.0,
            background_label=-1,
        ),
    ),
    NMSCase(
        "pixels",
        dict(
            score_threshold=0.1,
            nms_top_k=20,
            keep_top_k=25,
            nms_threshold=0.45,
            normalized=False,
            nms_eta=1.0,
            background_label=-1,
        ),
        pixels=True,
    ),
    NMSCase(
        "empty_image",
        dict(
            score_threshold=0.2,
            nms_top_k=-1,
            keep_top_k=15,
            nms_threshold=0.5,
            normalized=True,
            nms_eta=1.0,
            background_label=1,
        ),
        quiet=(1,),
    ),
    NMSCase(
        "all_empty",
        dict(
            score_threshold=0.5,
            nms_top_k=-1,
            keep_top_k=8,
            nms_threshold=0.5,
            normalized=True,
            nms_eta=1.0,
            background_label=-1,
        ),
        n=2,
        quiet=(0, 1),
    ),
    NMSCase(
        "adaptive_eta",
        dict(
            score_threshold=0.05,
            nms_top_k=-1,
            keep_top_k=-1,
            nms_threshold=0.8,
            normalized=True,
            nms_eta=0.9,
            background_label=-1,
        ),
        seed=1,
    ),
    NMSCase(
        "float64_pixels",
        dict(
            score_threshold=0.05,
            nms_top_k=30,
            keep_top_k=40,
            nms_threshold=0.6,
            normalized=False,
            nms_eta=0.95,
            background_label=0,
        ),
        pixels=True,
        dtype="float64",
        seed=2,
    ),
    NMSCase(
        "one_image_many_boxes",
        dict(
            score_threshold=0.3,
            nms_top_k=100,
            keep_top_k=50,
            nms_threshold=0.35,
            normalized=True,
            nms_eta=1.0,
            background_label=-1,
        ),
        n=1,
        m=300,
        c=6,
        seed=3,
    ),
    # NOTE: a PP-YOLOE-like head: many boxes, 80 classes, nms_top_k 1000, keep_top_k 100.
    NMSCase(
        "detector_sized",
        dict(
            score_threshold=0.6,
            nms_top_k=1000,
            keep_top_k=100,
            nms_threshold=0.7,
            normalized=False,
            nms_eta=1.0,
            background_label=-1,
        ),
        n=2,
        m=2100,
        c=80,
        pixels=True,
        seed=4,
    ),
]

MATRIX = [
    NMSCase(
        "matrix_linear",
        dict(score_threshold=0.05, post_threshold=0.1, nms_top_k=-1, keep_top_k=-1, background_label=-1),
    ),
    NMSCase(
        "matrix_gaussian_keep_top_k",
        dict(
            score_threshold=0.05,
            post_threshold=0.05,
            nms_top_k=-1,
            keep_top_k=12,
            use_gaussian=True,
            gaussian_sigma=2.0,
            background_label=0,
        ),
    ),
    NMSCase(
        "matrix_nms_top_k_pixels",
        dict(
            score_threshold=0.1, post_threshold=0.2, nms_top_k=8, keep_top_k=100, normalized=False, background_label=-1
        ),
        pixels=True,
        seed=1,
    ),
    NMSCase(
        "matrix_empty_image",
        dict(score_threshold=0.2, post_threshold=0.1, nms_top_k=-1, keep_top_k=10, background_label=-1),
        quiet=(2,),
        seed=2,
    ),
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


@pytest.mark.parametrize(
    "layer, case", [(MulticlassNMS, MULTICLASS[1]), (MatrixNMS, MATRIX[1])], ids=["multiclass_nms3", "matrix_nms"]
)
def test_nms_without_jit(layer, case):
    _run(layer(**case.attrs), case, jit=False)


def test_multiclass_nms3_in_graph():
    case = MULTICLASS[0]
    graph = capture.from_layer(MulticlassNMS(**case.attrs), _specs(case)).graph
    assert "pd_op.multiclass_nms3" in graph.op_names()


# ---------------------------------------------------------------------------------------------------------
# Two-stage detectors: multiclass_nms3 per RoI, generate_proposals, distribute_fpn_proposals


class PerRoiNMS(paddle.nn.Layer):
    def __init__(self, **attrs):
        super().__init__()
        self.attrs = attrs

    def forward(self, bboxes, scores, rois_num):
        a = self.attrs
        return paddle._C_ops.multiclass_nms3(
            bboxes,
            scores,
            rois_num,
            a["score_threshold"],
            a["nms_top_k"],
            a["keep_top_k"],
            a["nms_threshold"],
            a["normalized"],
            a["nms_eta"],
            a["background_label"],
        )


@dataclass(frozen=True)
class PerRoiCase:
    id: str
    attrs: dict
    rois_num: tuple = (12, 0, 20)  # RoIs per image; an image may have none
    padding: int = 8  # rows past sum(rois_num), which belong to no image
    c: int = 5
    dtype: str = "float32"
    seed: int = 0


def _per_roi_inputs(case: PerRoiCase):
    """A box per RoI and class: jittered copies of the RoI's base box (so classes' boxes overlap)."""
    rng = np.random.default_rng(case.seed)
    m = sum(case.rois_num) + case.padding
    xy = rng.uniform(0, 60, (m, 1, 2)) + rng.normal(0, 4, (m, case.c, 2))
    wh = rng.uniform(20, 40, (m, 1, 2)) * rng.uniform(0.9, 1.1, (m, case.c, 2))
    boxes = np.concatenate([xy, xy + wh], -1).astype(case.dtype)
    scores = rng.uniform(0, 1, (m, case.c)).astype(case.dtype)
    return boxes, scores, np.asarray(case.rois_num, "int32")


PER_ROI = [
    PerRoiCase(
        "per_roi_all",
        dict(
            score_threshold=0.05,
            nms_top_k=-1,
            keep_top_k=-1,
            nms_threshold=0.5,
            normalized=False,
            nms_eta=1.0,
            background_label=-1,
        ),
    ),
    PerRoiCase(
        "per_roi_keep_top_k_background",
        dict(
            score_threshold=0.2,
            nms_top_k=6,
            keep_top_k=9,
            nms_threshold=0.3,
            normalized=True,
            nms_eta=1.0,
            background_label=0,
        ),
        seed=1,
    ),
    PerRoiCase(
        "per_roi_eta_f64",
        dict(
            score_threshold=0.1,
            nms_top_k=100,
            keep_top_k=15,
            nms_threshold=0.7,
            normalized=False,
            nms_eta=0.8,
            background_label=2,
        ),
        rois_num=(9, 25),
        padding=0,
        dtype="float64",
        seed=2,
    ),
]


@pytest.mark.parametrize("case", PER_ROI, ids=[c.id for c in PER_ROI])
def test_multiclass_nms3_per_roi(case):
    boxes, scores, rois_num = _per_roi_inputs(case)
    layer = PerRoiNMS(**case.attrs)
    # NOTE: Paddle too gets the padding rows past sum(rois_num): its kernel reads only the rows rois_num
    # assigns to images, which is what paddle_xla must do with padded RoIs.
    want = layer(paddle.to_tensor(boxes), paddle.to_tensor(scores), paddle.to_tensor(rois_num))
    m = boxes.shape[0]
    specs = [
        InputSpec([m, case.c, 4], case.dtype, "bboxes"),
        InputSpec([m, case.c], case.dtype, "scores"),
        InputSpec([len(case.rois_num)], "int32", "rois_num"),
    ]
    got = paddle_xla.compile(layer, specs)(boxes, scores, rois_num)
    k, top = case.attrs["keep_top_k"], case.attrs["nms_top_k"]
    rows = k if k > -1 else case.c * (m if top < 0 else min(top, m))
    nms_case = NMSCase(case.id, case.attrs, n=len(case.rois_num), m=m, c=case.c)
    _assert_matches(nms_case, got, want, rows=rows)


class Proposals(paddle.nn.Layer):
    def __init__(self, **attrs):
        super().__init__()
        self.attrs = attrs

    def forward(self, scores, deltas, im_shape, anchors, variances):
        return paddle.vision.ops.generate_proposals(
            scores, deltas, im_shape, anchors, variances, return_rois_num=True, **self.attrs
        )


@dataclass(frozen=True)
class ProposalCase:
    id: str
    attrs: dict
    im_shape: tuple = ((96, 112), (80, 64), (1.5, 1.5))  # (height, width); the last leaves no proposal
    a: int = 3  # anchors per cell
    h: int = 6
    w: int = 7
    dtype: str = "float32"
    seed: int = 0


def _anchors(case):
    """Square anchors of sides 12, 24, 36 centred on a 16-pixel grid, [H, W, A, 4]."""
    cx = (np.arange(case.w) * 16 + 8)[None, :, None]
    cy = (np.arange(case.h) * 16 + 8)[:, None, None]
    half = (6 * np.arange(1, case.a + 1))[None, None, :]
    anchors = np.stack(np.broadcast_arrays(cx - half, cy - half, cx + half, cy + half), -1)
    return anchors.astype(case.dtype)


def _proposal_inputs(case: ProposalCase):
    rng = np.random.default_rng(case.seed)
    n = len(case.im_shape)
    scores = rng.uniform(0, 1, (n, case.a, case.h, case.w)).astype(case.dtype)
    deltas = rng.normal(0, 0.3, (n, 4 * case.a, case.h, case.w)).astype(case.dtype)
    variances = np.broadcast_to(np.asarray([0.1, 0.1, 0.2, 0.2], case.dtype), (case.h, case.w, case.a, 4))
    return [scores, deltas, np.asarray(case.im_shape, case.dtype), _anchors(case), np.array(variances)]


def _proposal_specs(case):
    n, a, h, w = len(case.im_shape), case.a, case.h, case.w
    return [
        InputSpec([n, a, h, w], case.dtype, "scores"),
        InputSpec([n, 4 * a, h, w], case.dtype, "deltas"),
        InputSpec([n, 2], case.dtype, "im_shape"),
        InputSpec([h, w, a, 4], case.dtype, "anchors"),
        InputSpec([h, w, a, 4], case.dtype, "variances"),
    ]


def _proposal_rows(case):
    """Rows per image: min(post_nms_top_n, candidates); every candidate without NMS or post_nms_top_n."""
    k = case.a * case.h * case.w
    pre, post = case.attrs["pre_nms_top_n"], case.attrs["post_nms_top_n"]
    p = k if pre <= 0 or pre >= k else pre
    return p if case.attrs["nms_thresh"] <= 0 or post <= 0 else min(post, p)


PROPOSALS = [
    ProposalCase(
        "pixel_offset_min_size",
        dict(pre_nms_top_n=60, post_nms_top_n=20, nms_thresh=0.5, min_size=12.0, pixel_offset=True),
    ),
    ProposalCase(
        "no_pixel_offset",
        dict(pre_nms_top_n=60, post_nms_top_n=25, nms_thresh=0.5, min_size=4.0, pixel_offset=False),
        seed=1,
    ),
    ProposalCase(
        "every_anchor_adaptive_eta",
        dict(pre_nms_top_n=-1, post_nms_top_n=-1, nms_thresh=0.6, min_size=0.1, eta=0.9, pixel_offset=True),
        seed=2,
    ),
    # NOTE: pre_nms_top_n covers every anchor, so Paddle sorts them all (std::sort); with fewer it leaves
    # std::nth_element's order, which nms_thresh 0 (no NMS) would show.
    ProposalCase(
        "no_nms", dict(pre_nms_top_n=1000, post_nms_top_n=30, nms_thresh=0.0, min_size=8.0, pixel_offset=True), seed=3
    ),
    ProposalCase(
        "float64",
        dict(pre_nms_top_n=100, post_nms_top_n=40, nms_thresh=0.7, min_size=2.0, pixel_offset=True),
        im_shape=((64, 128), (100, 100)),
        a=2,
        h=8,
        w=8,
        dtype="float64",
        seed=4,
    ),
]


def _assert_rows(got, want, counts, msg):
    """got: Paddle's rows `want` (split into images by counts) as a prefix, then zero rows."""
    total = int(np.sum(counts))
    assert got.shape[0] >= total and got.dtype == want.dtype, f"{msg}: {got.shape} {got.dtype}"
    starts = np.concatenate([[0], np.cumsum(counts)])
    for i in range(len(counts)):
        np.testing.assert_allclose(
            got[starts[i] : starts[i + 1]], want[starts[i] : starts[i + 1]], rtol=1e-6, err_msg=f"{msg}: image {i}"
        )
    assert (got[total:] == 0).all(), f"{msg}: padding rows"


@pytest.mark.parametrize("case", PROPOSALS, ids=[c.id for c in PROPOSALS])
def test_generate_proposals(case):
    inputs = _proposal_inputs(case)
    layer = Proposals(**case.attrs)
    want = [w.numpy() for w in layer(*(paddle.to_tensor(x) for x in inputs))]
    rois, probs, num = (np.asarray(g) for g in paddle_xla.compile(layer, _proposal_specs(case))(*inputs))
    rows = len(case.im_shape) * _proposal_rows(case)
    assert rois.shape == (rows, 4) and probs.shape == (rows, 1) and num.dtype == np.int32
    np.testing.assert_array_equal(num, want[2], err_msg=f"{case.id}: proposals per image")
    _assert_rows(rois, want[0], num, f"{case.id} rois")
    _assert_rows(probs, want[1], num, f"{case.id} probs")


def test_generate_proposals_cases_bite():
    """The cases exercise what they claim: NMS suppresses, min_size removes boxes, an image has none."""
    case = PROPOSALS[0]
    inputs = [paddle.to_tensor(x) for x in _proposal_inputs(case)]
    num = Proposals(**case.attrs)(*inputs)[2].numpy()
    no_nms = Proposals(**{**case.attrs, "nms_thresh": 0.0, "post_nms_top_n": -1})(*inputs)[2].numpy()
    small = Proposals(**{**case.attrs, "min_size": 0.1, "nms_thresh": 0.0, "post_nms_top_n": -1})(*inputs)
    assert num[-1] == 1 and no_nms[-1] == 1, "the last image keeps only Paddle's zero row"
    assert (no_nms[:-1] > num[:-1]).all(), "NMS suppresses"
    assert (small[2].numpy()[:-1] > no_nms[:-1]).all(), "min_size removes boxes"


class DistributeFPN(paddle.nn.Layer):
    def __init__(self, **attrs):
        super().__init__()
        self.attrs = attrs

    def forward(self, rois, rois_num):
        multi_rois, restore, multi_num = paddle.vision.ops.distribute_fpn_proposals(
            rois, rois_num=rois_num, **self.attrs
        )
        return *multi_rois, restore, *multi_num


@dataclass(frozen=True)
class FPNCase:
    id: str
    attrs: dict
    rois_num: tuple = (15, 0, 22, 9)
    padding: int = 10  # rows past sum(rois_num), as generate_proposals leaves them
    dtype: str = "float32"
    seed: int = 0
    levels: int = field(init=False, default=0)

    def __post_init__(self):
        object.__setattr__(self, "levels", self.attrs["max_level"] - self.attrs["min_level"] + 1)


def _fpn_inputs(case: FPNCase):
    """RoIs of sides from 2 to 900 pixels (log-uniform), so every level gets some; padding rows are 0."""
    rng = np.random.default_rng(case.seed)
    total = sum(case.rois_num)
    xy = rng.uniform(0, 500, (total, 2))
    wh = np.exp(rng.uniform(np.log(2), np.log(900), (total, 2)))
    rois = np.zeros((total + case.padding, 4), case.dtype)
    rois[:total] = np.concatenate([xy, xy + wh], -1)
    return rois, np.asarray(case.rois_num, "int32")


FPN = [
    FPNCase("fpn_levels_2_5", dict(min_level=2, max_level=5, refer_level=4, refer_scale=224, pixel_offset=True)),
    FPNCase(
        "fpn_no_pixel_offset_clamped",
        dict(min_level=3, max_level=4, refer_level=4, refer_scale=112, pixel_offset=False),
        seed=1,
    ),
    FPNCase(
        "fpn_f64_unpadded",
        dict(min_level=1, max_level=6, refer_level=3, refer_scale=64, pixel_offset=True),
        rois_num=(30, 11),
        padding=0,
        dtype="float64",
        seed=2,
    ),
]


def _assert_levels(case, got, want_rois, want_restore, want_nums, rows):
    """Each level's RoIs and counts as Paddle's; restore_index as Paddle's with levels padded to `rows`."""
    levels = case.levels
    got_rois, got_restore, got_nums = got[:levels], got[levels], got[levels + 1 :]
    sizes = [w.shape[0] for w in want_rois]
    for lv in range(levels):
        msg = f"{case.id}: level {lv}"
        assert got_rois[lv].shape == (rows, 4), f"{msg}: {got_rois[lv].shape}"
        np.testing.assert_array_equal(got_nums[lv], want_nums[lv], err_msg=f"{msg} rois_num")
        assert got_nums[lv].dtype == np.int32
        np.testing.assert_array_equal(got_rois[lv][: sizes[lv]], want_rois[lv], err_msg=f"{msg} rois")
        assert (got_rois[lv][sizes[lv] :] == 0).all(), f"{msg}: padding rows"
    total = int(sum(sizes))
    restore = got_restore[:, 0]
    assert got_restore.shape == (rows, 1) and got_restore.dtype == np.int32
    # NOTE: paddle_xla's restore_index counts rows in the padded levels (level * rows + place); Paddle's
    # in the unpadded ones (earlier levels' sizes + place). Translated, the two must agree exactly.
    level = restore[:total] // rows
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    np.testing.assert_array_equal(
        restore[:total] - level * rows + offsets[level], want_restore[:, 0], err_msg=f"{case.id}: restore_index"
    )
    np.testing.assert_array_equal(
        restore[total:], (levels - 1) * rows + np.arange(total, rows), err_msg=f"{case.id}: padding of restore_index"
    )


@pytest.mark.parametrize("case", FPN, ids=[c.id for c in FPN])
def test_distribute_fpn_proposals(case):
    rois, rois_num = _fpn_inputs(case)
    layer = DistributeFPN(**case.attrs)
    # NOTE: Paddle gets the padding rows too; its kernel reads only the sum(rois_num) rows rois_num covers.
    want = [w.numpy() for w in layer(paddle.to_tensor(rois), paddle.to_tensor(rois_num))]
    specs = [InputSpec(list(rois.shape), case.dtype, "rois"), InputSpec([len(rois_num)], "int32", "rois_num")]
    got = [np.asarray(g) for g in paddle_xla.compile(layer, specs)(rois, rois_num)]
    levels = case.levels
    _assert_levels(case, got, want[:levels], want[levels], want[levels + 1 :], rois.shape[0])


class TwoStageHead(paddle.nn.Layer):
    """A Faster R-CNN FPN deploy graph's proposal path: RPN proposals, FPN levels, RoIAlign on each level's
    map, the features put back in proposal order with restore_index (PaddleDetection's RoIAlign)."""

    def forward(self, scores, deltas, im_shape, anchors, variances, feats):
        rois, _, rois_num = paddle.vision.ops.generate_proposals(
            scores,
            deltas,
            im_shape,
            anchors,
            variances,
            pre_nms_top_n=60,
            post_nms_top_n=20,
            nms_thresh=0.5,
            min_size=4.0,
            pixel_offset=True,
            return_rois_num=True,
        )
        multi_rois, restore, multi_num = paddle.vision.ops.distribute_fpn_proposals(
            rois, 2, 3, 2, 16, pixel_offset=True, rois_num=rois_num
        )
        per_level = [
            paddle.vision.ops.roi_align(feats * (lv + 1), r, n, 3, spatial_scale=0.25 / (lv + 1))
            for lv, (r, n) in enumerate(zip(multi_rois, multi_num))
        ]
        # NOTE: PaddleDetection gathers with restore_index itself, [R, 1] (Paddle's gather reads it as [R]).
        return paddle.gather(paddle.concat(per_level), restore), rois_num, *multi_num


def test_two_stage_proposal_path():
    """generate_proposals -> distribute_fpn_proposals -> roi_align per level -> gather(restore_index): the
    valid rows are Paddle's, in proposal order, for several images."""
    case = ProposalCase("path", {})
    inputs = _proposal_inputs(case) + [np.random.default_rng(5).normal(size=(3, 4, 24, 28)).astype("float32")]
    layer = TwoStageHead()
    want_feats, *want_nums = (w.numpy() for w in layer(*(paddle.to_tensor(x) for x in inputs)))
    specs = _proposal_specs(case) + [InputSpec([3, 4, 24, 28], "float32", "feats")]
    got_feats, *got_nums = (np.asarray(g) for g in paddle_xla.compile(layer, specs)(*inputs))
    for got, want in zip(got_nums, want_nums):
        np.testing.assert_array_equal(got, want)
    want_num, per_level = want_nums[0], want_nums[1:]
    assert all(n.sum() > 0 for n in per_level), "both levels get RoIs, so restore_index reorders"
    total = int(want_num.sum())
    assert got_feats.shape == (3 * 20, 4, 3, 3) and total < got_feats.shape[0]
    np.testing.assert_allclose(got_feats[:total], want_feats, rtol=1e-5, atol=1e-5)


@x64.enabled
def _lower_eagerly(layer, specs, inputs):
    graph = capture.from_layer(layer, specs).graph
    outs, _ = lower(graph)({}, {}, {spec.name: x for spec, x in zip(specs, inputs)})
    return [np.asarray(o) for o in outs]


def test_two_stage_without_jit():
    case = PROPOSALS[0]
    inputs = _proposal_inputs(case)
    layer = Proposals(**case.attrs)
    want = [w.numpy() for w in layer(*(paddle.to_tensor(x) for x in inputs))]
    rois, probs, num = _lower_eagerly(layer, _proposal_specs(case), inputs)
    np.testing.assert_array_equal(num, want[2])
    _assert_rows(rois, want[0], num, f"{case.id} rois")
    _assert_rows(probs, want[1], num, f"{case.id} probs")
    fpn = FPN[0]
    rois, rois_num = _fpn_inputs(fpn)
    layer = DistributeFPN(**fpn.attrs)
    want = [w.numpy() for w in layer(paddle.to_tensor(rois), paddle.to_tensor(rois_num))]
    specs = [InputSpec(list(rois.shape), fpn.dtype, "rois"), InputSpec([len(rois_num)], "int32", "rois_num")]
    got = _lower_eagerly(layer, specs, [rois, rois_num])
    levels = fpn.levels
    _assert_levels(fpn, got, want[:levels], want[levels], want[levels + 1 :], rois.shape[0])


def test_two_stage_ops_in_graph():
    case = PROPOSALS[0]
    graph = capture.from_layer(Proposals(**case.attrs), _proposal_specs(case)).graph
    assert "pd_op.generate_proposals" in graph.op_names()
    fpn = FPN[0]
    specs = [InputSpec([50, 4], "float32", "rois"), InputSpec([4], "int32", "rois_num")]
    graph = capture.from_layer(DistributeFPN(**fpn.attrs), specs).graph
    assert "pd_op.distribute_fpn_proposals" in graph.op_names()


# ---------------------------------------------------------------------------------------------------------
# A one-stage detector end to end: conv head -> yolo_box -> multiclass_nms3, as a YOLO deploy export runs


class TinyYolo(paddle.nn.Layer):
    """Two convolutions and a YOLO head over one 8 x 8 map (3 anchors, 4 classes), decoded by yolo_box and
    reduced by multiclass_nms3 the way PaddleDetection's post-processing calls it."""

    def __init__(self):
        super().__init__()
        self.body = paddle.nn.Sequential(
            paddle.nn.Conv2D(3, 8, 3, stride=2, padding=1),
            paddle.nn.ReLU(),
            paddle.nn.Conv2D(8, 8, 3, stride=2, padding=1),
            paddle.nn.ReLU(),
        )
        self.head = paddle.nn.Conv2D(8, 3 * (5 + 4), 1)

    def forward(self, image, im_size):
        boxes, scores = paddle.vision.ops.yolo_box(
            self.head(self.body(image)),
            im_size,
            [6, 8, 12, 14, 20, 22],
            class_num=4,
            conf_thresh=0.01,
            downsample_ratio=4,
        )
        return paddle._C_ops.multiclass_nms3(
            boxes, scores.transpose([0, 2, 1]), None, 0.05, 100, 20, 0.45, False, 1.0, -1
        )


def test_a_small_detector_with_nms_matches_paddle():
    paddle.seed(3)
    layer = TinyYolo()
    layer.eval()
    rng = np.random.default_rng(7)
    image = rng.normal(size=(2, 3, 32, 32)).astype("float32")
    im_size = np.array([[32, 32], [30, 28]], "int32")
    want = layer(paddle.to_tensor(image), paddle.to_tensor(im_size))
    specs = [InputSpec([2, 3, 32, 32], "float32", "image"), InputSpec([2, 2], "int32", "im_size")]
    got = paddle_xla.compile(layer, specs)(image, im_size)
    case = NMSCase("tiny_yolo", dict(keep_top_k=20, nms_top_k=100), n=2, m=3 * 8 * 8, c=4)
    assert int(want[2].numpy().min()) > 0, "every image must keep detections"
    _assert_matches(case, got, want)
