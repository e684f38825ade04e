"""yolo_box, prior_box, box_coder, roi_align (the ops with variable-size outputs are in test_detection.py).
Boxes are built from uniform inputs so their corners are ordered; detection ops have no gradient in Paddle, so
no case compares one."""

import paddle
from paddle.vision import ops as V

from .harness import Arg, OpCase

# NOTE: multiclass_nms3, matrix_nms, generate_proposals and distribute_fpn_proposals return a variable number
# of rows in Paddle but a padded, fixed number under paddle_xla, so tests/ops/test_detection.py compares them
# image by image (or FPN level by level) instead.
COVERED = ["pd_op.multiclass_nms3", "pd_op.matrix_nms", "pd_op.generate_proposals", "pd_op.distribute_fpn_proposals"]

ANCHORS = [10, 13, 16, 30, 33, 23]
IMG_SIZE = Arg((2, 2), "int32", 200, 420)


def _yolo(conf_thresh=0.3, **kw):
    return lambda x, img_size: V.yolo_box(x, img_size, ANCHORS, 4, conf_thresh, 32, **kw)


def _corners(u, scale=1.0):
    """Boxes (x1, y1, x2, y2) from uniform [R, 4] values: a corner and a positive size."""
    return paddle.concat([u[:, :2], u[:, :2] + u[:, 2:]], axis=-1) * scale


def _box_coder(prior, var, target, code_type, box_normalized=True, axis=0):
    if var is None:
        # NOTE: paddle.vision.ops.box_coder refuses prior_box_var=None, which the op itself allows.
        return paddle._C_ops.box_coder(prior, None, target, code_type, box_normalized, axis, [])
    return V.box_coder(prior, var, target, code_type, box_normalized, axis=axis)


def _encode(var=None, **kw):
    return lambda p, t: _box_coder(_corners(p), var, _corners(t), "encode_center_size", **kw)


def _encode_var(**kw):
    return lambda p, v, t: _box_coder(_corners(p), v, _corners(t), "encode_center_size", **kw)


def _decode(var=None, **kw):
    return lambda p, t: _box_coder(_corners(p), var, t, "decode_center_size", **kw)


def _decode_var(**kw):
    return lambda p, v, t: _box_coder(_corners(p), v, t, "decode_center_size", **kw)


def _roi_align(output_size, **kw):
    def call(x, u):
        # NOTE: RoIs reach past the map's edges (corners up to 14 on a 12 x 10 map) to test Paddle's clamps.
        boxes = _corners(u, 7.0)
        return V.roi_align(x, boxes, paddle.to_tensor([2, 3], "int32"), output_size, **kw)

    return call


X_ROI = Arg((2, 3, 10, 12))
ROIS = Arg((5, 4), "float32", 0.0, 1.0)

CASES = [
    OpCase("yolo_box", _yolo(), [Arg((2, 27, 5, 6)), IMG_SIZE], ["pd_op.yolo_box"], grad=False),
    OpCase(
        "yolo_box_scale_xy_no_clip",
        _yolo(clip_bbox=False, scale_x_y=1.05, conf_thresh=0.5),
        [Arg((2, 27, 4, 3)), IMG_SIZE],
        ["pd_op.yolo_box"],
        grad=False,
    ),
    OpCase(
        "yolo_box_iou_aware",
        _yolo(iou_aware=True, iou_aware_factor=0.4),
        [Arg((2, 30, 5, 6)), IMG_SIZE],
        ["pd_op.yolo_box"],
        grad=False,
    ),
    OpCase(
        "yolo_box_f64",
        _yolo(conf_thresh=0.1),
        [Arg((1, 27, 3, 4), "float64"), Arg((1, 2), "int32", 100, 300)],
        ["pd_op.yolo_box"],
        grad=False,
    ),
    OpCase(
        "prior_box",
        lambda x, im: V.prior_box(x, im, [4.0, 9.0], [7.0, 12.0], [2.0, 3.0], flip=True),
        [Arg((1, 8, 5, 6)), Arg((1, 3, 40, 48))],
        ["pd_op.prior_box"],
        grad=False,
    ),
    OpCase(
        "prior_box_clip_steps_order",
        lambda x, im: V.prior_box(
            x,
            im,
            [16.0],
            [30.0],
            [1.0, 2.0, 0.5],
            variance=[0.1, 0.2, 0.3, 0.4],
            clip=True,
            steps=[7.0, 9.0],
            offset=0.4,
            min_max_aspect_ratios_order=True,
        ),
        [Arg((2, 4, 6, 5)), Arg((2, 3, 48, 36))],
        ["pd_op.prior_box"],
        grad=False,
    ),
    OpCase(
        "prior_box_f64_no_max",
        lambda x, im: V.prior_box(x, im, [3.0, 5.0], aspect_ratios=[2.0], flip=True),
        [Arg((1, 2, 3, 4), "float64"), Arg((1, 3, 30, 32), "float64")],
        ["pd_op.prior_box"],
        grad=False,
    ),
    OpCase(
        "box_coder_encode",
        _encode(),
        [Arg((6, 4), low=0.1, high=1.0), Arg((3, 4), low=0.1, high=1.0)],
        ["pd_op.box_coder"],
        grad=False,
    ),
    OpCase(
        "box_coder_encode_var_pixels",
        _encode_var(box_normalized=False),
        [Arg((6, 4), low=1.0, high=30.0), Arg((6, 4), low=0.1, high=0.3), Arg((4, 4), low=1.0, high=30.0)],
        ["pd_op.box_coder"],
        grad=False,
    ),
    OpCase(
        "box_coder_encode_var_list",
        _encode(var=[0.1, 0.1, 0.2, 0.2]),
        [Arg((5, 4), low=0.1, high=1.0), Arg((2, 4), low=0.1, high=1.0)],
        ["pd_op.box_coder"],
        grad=False,
    ),
    OpCase(
        "box_coder_decode", _decode(), [Arg((6, 4), low=0.1, high=1.0), Arg((3, 6, 4))], ["pd_op.box_coder"], grad=False
    ),
    OpCase(
        "box_coder_decode_var",
        _decode_var(),
        [Arg((6, 4), low=0.1, high=1.0), Arg((6, 4), low=0.1, high=0.3), Arg((3, 6, 4))],
        ["pd_op.box_coder"],
        grad=False,
    ),
    OpCase(
        "box_coder_decode_axis1_var_list_pixels",
        _decode(var=[0.1, 0.1, 0.2, 0.2], box_normalized=False, axis=1),
        [Arg((3, 4), low=1.0, high=30.0), Arg((3, 5, 4))],
        ["pd_op.box_coder"],
        grad=False,
    ),
    OpCase(
        "box_coder_decode_axis1_var",
        _decode_var(axis=1),
        [Arg((3, 4), low=0.1, high=1.0), Arg((3, 4), low=0.1, high=0.3), Arg((3, 5, 4))],
        ["pd_op.box_coder"],
        grad=False,
    ),
    OpCase("roi_align_adaptive", _roi_align(3), [X_ROI, ROIS], ["pd_op.roi_align"], grad=False),
    OpCase(
        "roi_align_unaligned_sampling2",
        _roi_align((2, 3), sampling_ratio=2, aligned=False),
        [X_ROI, ROIS],
        ["pd_op.roi_align"],
        grad=False,
    ),
    OpCase(
        "roi_align_scale_unaligned_adaptive",
        _roi_align(2, spatial_scale=0.5, aligned=False),
        [X_ROI, ROIS],
        ["pd_op.roi_align"],
        grad=False,
    ),
    OpCase(
        "roi_align_f64",
        _roi_align((3, 2), sampling_ratio=1),
        [Arg((2, 2, 6, 5), "float64"), Arg((5, 4), "float64", 0.0, 1.0)],
        ["pd_op.roi_align"],
        grad=False,
    ),
]
