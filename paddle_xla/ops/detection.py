"""Detection: the pre- and post-processing ops of PaddleDetection deploy exports. Non-maximum suppression
(multiclass_nms3, matrix_nms), YOLO box decoding (yolo_box), SSD anchors and box codes (prior_box,
box_coder), RoIAlign (roi_align), and two-stage detectors' region proposals and FPN levels
(generate_proposals, distribute_fpn_proposals). Each follows Paddle's CPU kernel step by step, in its order
of float operations, so results match Paddle's to the last bit or nearly (where Paddle rounds through double).

Paddle's outputs here have data-dependent sizes; XLA needs static ones, so each output is padded to the most
rows Paddle could return, with the valid count as an output. NMS results (terminal outputs) are padded per
image. RoI tensors that feed other ops with their rois_num (generate_proposals' and distribute_fpn_proposals')
instead hold Paddle's exact tensor as a prefix with the padding after it, so a consumer that splits rows by
rois_num, as Paddle's kernels and roi_align here do, finds each image's RoIs where Paddle would.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from .registry import lowering

# ---------------------------------------------------------------------------------------------------------
# Box geometry


def _area(b, normalized):
    """Paddle's BBoxArea: 0 for an inverted box; pixel boxes (not normalized) count both end pixels."""
    one = 0 if normalized else 1
    w, h = b[..., 2] - b[..., 0], b[..., 3] - b[..., 1]
    inverted = (b[..., 2] < b[..., 0]) | (b[..., 3] < b[..., 1])
    return jnp.where(inverted, jnp.zeros_like(w), (w + one) * (h + one))


def _jaccard(a, b, normalized):
    """Paddle's JaccardOverlap of boxes a and b (x1, y1, x2, y2; broadcast against each other)."""
    one = 0 if normalized else 1
    disjoint = (b[..., 0] > a[..., 2]) | (b[..., 2] < a[..., 0]) | (b[..., 1] > a[..., 3]) | (b[..., 3] < a[..., 1])
    inter_w = jnp.minimum(a[..., 2], b[..., 2]) - jnp.maximum(a[..., 0], b[..., 0]) + one
    inter_h = jnp.minimum(a[..., 3], b[..., 3]) - jnp.maximum(a[..., 1], b[..., 1]) + one
    inter = inter_w * inter_h
    iou = inter / (_area(a, normalized) + _area(b, normalized) - inter)
    return jnp.where(disjoint, jnp.zeros_like(iou), iou)


# ---------------------------------------------------------------------------------------------------------
# Non-maximum suppression


def _candidates(bboxes, scores, score_threshold, nms_top_k, background_label, real=None):
    """Per image and class, the boxes scoring above the threshold, best first, at most nms_top_k of them.

    bboxes [N, M, 4] (or [N, C, M, 4], a box per class), scores [N, C, M], real [N, M] (which boxes exist;
    all when None) -> scores [N, C, P], box ids [N, C, P], boxes [N, C, P, 4], and which of the P slots hold
    a candidate (always a prefix)."""
    n, c, m = scores.shape
    p = m if nms_top_k < 0 else min(nms_top_k, m)
    above = scores > jnp.asarray(score_threshold, scores.dtype)
    above = above & (jnp.arange(c) != background_label)[None, :, None]
    if real is not None:
        above = above & real[:, None, :]
    key = jnp.where(above, scores, -jnp.inf)
    # NOTE: lax.top_k puts equal scores in box order, as the std::stable_sort in Paddle's
    # GetMaxScoreIndex does; scores below the threshold sort last as -inf (a kept score is > -inf).
    top, ids = lax.top_k(key, p)
    per_class = bboxes if bboxes.ndim == 4 else bboxes[:, None]
    boxes = jnp.take_along_axis(per_class, ids[..., None], axis=2)
    return top, ids, boxes, top > -jnp.inf


def _prefix_steps(valid):
    """How many candidate slots a loop must visit: the longest valid prefix of any class."""
    return jnp.max(jnp.sum(valid, axis=-1, dtype=jnp.int32), initial=0)


def _at(x, i, axis):
    return lax.dynamic_index_in_dim(x, i, axis=axis, keepdims=False)


def _set(x, v, i, axis):
    return lax.dynamic_update_index_in_dim(x, jnp.expand_dims(v, axis), i, axis=axis)


def _greedy_nms(boxes, valid, nms_threshold, nms_eta, normalized):
    """Paddle's NMSFast over candidates sorted best first: a box is kept unless it overlaps an earlier kept
    box by more than the (adaptive) threshold. boxes [..., P, 4], valid [..., P] -> kept [..., P]."""
    dt = boxes.dtype
    eta = np.asarray(nms_eta, dt)

    def step(i, state):
        kept, threshold = state
        iou = _jaccard(_at(boxes, i, -2)[..., None, :], boxes, normalized)
        # NOTE: `not iou <= threshold` rather than `iou > threshold`: a NaN overlap suppresses, as in Paddle.
        clash = jnp.any(kept & ~(iou <= threshold[..., None]), axis=-1)
        keep = _at(valid, i, -1) & ~clash
        if nms_eta < 1:
            # NOTE: Paddle shrinks the threshold after each kept box while it is above 0.5 (adaptive NMS).
            threshold = jnp.where(keep & (threshold > 0.5), threshold * eta, threshold)
        return _set(kept, keep, i, -1), threshold

    threshold = jnp.full(valid.shape[:-1], nms_threshold, dt)
    kept, _ = lax.fori_loop(0, _prefix_steps(valid), step, (jnp.zeros_like(valid), threshold))
    return kept


def _pad_to(x, size, fill):
    """Pad axis 1 of x to `size` with `fill`."""
    extra = size - x.shape[1]
    if extra <= 0:
        return x
    widths = [(0, 0), (0, extra)] + [(0, 0)] * (x.ndim - 2)
    return jnp.pad(x, widths, constant_values=fill)


def _pack(selected, labels, scores, boxes, ids, rows, key=None):
    """Each image's selected detections first (in flat order, or by `key` descending), then padding; `rows`
    per image. All inputs are flat per image: [N, K] (boxes [N, K, 4], ids are offsets into the boxes input).

    -> out [N * rows, 6] (label, score, box), index [N * rows, 1], count [N]."""
    n = selected.shape[0]
    # NOTE: XLA needs a static shape, so every image gets `rows` rows, its valid ones first and padding after
    # (label -1, score 0, box 0, index -1), with the valid count per image in the third output, as
    # TensorFlow's combined_non_max_suppression does. Paddle returns only the valid rows.
    selected, labels, scores, ids = (
        _pad_to(a, rows, f) for a, f in ((selected, False), (labels, -1), (scores, 0), (ids, -1))
    )
    boxes = _pad_to(boxes, rows, 0)
    if key is None:
        order = jnp.argsort(~selected, axis=1, stable=True)
    else:
        order = jnp.argsort(jnp.where(selected, _pad_to(key, rows, 0), -jnp.inf), axis=1, descending=True, stable=True)
    order = order[:, :rows]
    valid = jnp.take_along_axis(selected, order, axis=1)

    def take(a, fill):
        got = jnp.take_along_axis(a, order.reshape(order.shape + (1,) * (a.ndim - 2)), axis=1)
        mask = valid.reshape(valid.shape + (1,) * (a.ndim - 2))
        return jnp.where(mask, got, jnp.asarray(fill, a.dtype))

    dt = scores.dtype
    out = jnp.concatenate([take(labels, -1).astype(dt)[..., None], take(scores, 0)[..., None], take(boxes, 0)], axis=-1)
    index = take(ids, -1).astype(jnp.int32)
    count = jnp.minimum(jnp.sum(selected, axis=1, dtype=jnp.int32), rows)
    return out.reshape(n * rows, 6), index.reshape(n * rows, 1), count


def _flat_detections(ids, boxes, m):
    """Per image, the class of each candidate slot, its offset into the flattened boxes input, and its box,
    flattened class-major: [N, C * P] and [N, C * P, 4]."""
    n, c, p = ids.shape
    labels = jnp.broadcast_to(jnp.arange(c, dtype=jnp.int32)[None, :, None], ids.shape)
    offsets = ids + (jnp.arange(n, dtype=ids.dtype) * m)[:, None, None]
    return labels.reshape(n, c * p), offsets.reshape(n, c * p), boxes.reshape(n, c * p, 4)


def _check_nms_inputs(op, bboxes, scores, rois_num=None, two_stage=False):
    if np.ndim(scores) == 2 and two_stage:
        if rois_num is None:
            raise ValueError(f"{op} with 2-D scores needs rois_num (Paddle's LoD form has no PIR equivalent)")
        if np.ndim(bboxes) != 3 or np.shape(bboxes)[:2] != np.shape(scores):
            raise ValueError(f"{op} with 2-D scores [M, C] needs boxes [M, C, 4], got {np.shape(bboxes)}")
    elif np.ndim(scores) != 3 or (rois_num is not None and not two_stage):
        raise ValueError(
            f"{op} with 2-D scores and rois_num (two-stage detectors' per-RoI boxes) is not "
            "supported; only batched boxes [N, M, 4] with scores [N, C, M]"
        )
    if np.shape(bboxes)[-1] != 4:
        raise ValueError(f"{op} with polygon boxes ({np.shape(bboxes)[-1]} coordinates) is not supported")


def _keep_best(kept, top, keep_top_k):
    """Paddle's keep_top_k: an image's keep_top_k best detections over all classes, [N, K] flat."""
    if keep_top_k < 0:
        return kept
    # NOTE: Paddle ranks by a stable sort of the scores as float, in the flat order it lists detections.
    key = jnp.where(kept, top.astype(jnp.float32), -jnp.inf)
    rank = jnp.argsort(jnp.argsort(key, axis=1, descending=True, stable=True), axis=1)
    return kept & (rank < keep_top_k)


@lowering("pd_op.multiclass_nms3")
def multiclass_nms3(
    bboxes,
    scores,
    rois_num=None,
    *,
    score_threshold,
    nms_top_k,
    keep_top_k,
    nms_threshold=0.3,
    normalized=True,
    nms_eta=1.0,
    background_label=0,
):
    _check_nms_inputs("multiclass_nms3", bboxes, scores, rois_num, two_stage=True)
    # NOTE: Paddle reads rois_num only with 2-D scores; batched 3-D scores carry their images in axis 0.
    if np.ndim(scores) == 2:
        return _multiclass_nms3_per_roi(
            bboxes,
            scores,
            rois_num,
            score_threshold,
            nms_top_k,
            keep_top_k,
            nms_threshold,
            normalized,
            nms_eta,
            background_label,
        )
    n, c, m = scores.shape
    top, ids, boxes, valid = _candidates(bboxes, scores, score_threshold, nms_top_k, background_label)
    kept = _greedy_nms(boxes, valid, nms_threshold, nms_eta, normalized)
    labels, offsets, flat_boxes = _flat_detections(ids, boxes, m)
    kept, top = kept.reshape(n, -1), top.reshape(n, -1)
    # NOTE: Paddle keeps the keep_top_k best, then writes them out class by class, as _pack does below.
    kept = _keep_best(kept, top, keep_top_k)
    # NOTE: with keep_top_k = -1 an image can keep every candidate of every class: C * min(M, nms_top_k)
    # rows (C * M when nms_top_k is -1 too), which is the static bound used then.
    rows = keep_top_k if keep_top_k > -1 else kept.shape[1]
    # NOTE: Paddle's rows are grouped by class (ascending), best score first within a class; that is the
    # flat class-major candidate order, so no sort by score across classes here.
    return _pack(kept, labels, top, flat_boxes, offsets, rows)


def _rois_by_image(rois_num, m):
    """Paddle's rois_num split of M rows into images: each image's first row and a window of M rows from
    it, [N, M], with which of them are the image's own (the rest are padding)."""
    counts = rois_num.astype(jnp.int32)
    starts = jnp.cumsum(counts) - counts
    rows = starts[:, None] + jnp.arange(m, dtype=jnp.int32)[None, :]
    own = jnp.arange(m, dtype=jnp.int32)[None, :] < counts[:, None]
    return starts, jnp.minimum(rows, m - 1), own


def _by_roi_order(kept, top, ids, boxes):
    """Each class's slots reordered: kept candidates first, by RoI index ascending."""
    order = jnp.argsort(jnp.where(kept, ids, np.iinfo(np.int32).max), axis=-1, stable=True)

    def take(a):
        return jnp.take_along_axis(a, order.reshape(order.shape + (1,) * (a.ndim - 3)), axis=2)

    return take(kept), take(top), take(ids), take(boxes)


def _multiclass_nms3_per_roi(
    bboxes,
    scores,
    rois_num,
    score_threshold,
    nms_top_k,
    keep_top_k,
    nms_threshold,
    normalized,
    nms_eta,
    background_label,
):
    """Two-stage detectors' form: a box per RoI and class, bboxes [M, C, 4] and scores [M, C], and rois_num
    splitting the M RoIs into images. Rows past sum(rois_num) belong to no image."""
    m, c = scores.shape
    n = rois_num.shape[0]
    starts, rows, own = _rois_by_image(rois_num, m)
    image_scores = jnp.moveaxis(scores[rows], 2, 1)  # [N, C, M]
    image_boxes = jnp.moveaxis(bboxes[rows], 2, 1)  # [N, C, M, 4]
    top, ids, boxes, valid = _candidates(
        image_boxes, image_scores, score_threshold, nms_top_k, background_label, real=own
    )
    kept = _greedy_nms(boxes, valid, nms_threshold, nms_eta, normalized)
    # NOTE: in this form Paddle sorts each class's kept RoIs by RoI index (std::stable_sort of the indices
    # in MultiClassNMS), so an image's rows are by class, then RoI, and keep_top_k breaks equal scores that
    # way too.
    kept, top, ids, boxes = _by_roi_order(kept, top, ids, boxes)
    labels = jnp.broadcast_to(jnp.arange(c, dtype=jnp.int32)[None, :, None], ids.shape)
    # NOTE: Paddle's index here is (row of the RoI in the input) * C + label: a flat index into scores.
    index = (starts[:, None, None] + ids) * c + labels
    kept, top = kept.reshape(n, -1), top.reshape(n, -1)
    kept = _keep_best(kept, top, keep_top_k)
    rows_out = keep_top_k if keep_top_k > -1 else kept.shape[1]
    return _pack(kept, labels.reshape(n, -1), top, boxes.reshape(n, -1, 4), index.reshape(n, -1), rows_out)


def _matrix_decay(boxes, valid, scores, use_gaussian, gaussian_sigma, normalized):
    """Paddle's NMSMatrix: each candidate's score decayed by its overlaps with every better candidate.
    boxes [..., P, 4] best first, valid and scores [..., P] -> decayed scores [..., P]."""
    dt = boxes.dtype
    p = boxes.shape[-2]
    sigma = np.asarray(gaussian_sigma, dt)

    def step(i, state):
        iou_max, decayed = state
        iou = _jaccard(_at(boxes, i, -2)[..., None, :], boxes, normalized)
        earlier = jnp.arange(p) < i
        # NOTE: Paddle's std::max / std::min keep the running value when compared with NaN: NaNs are skipped.
        max_i = jnp.max(jnp.where(earlier & ~jnp.isnan(iou), iou, 0), axis=-1, initial=0)
        if use_gaussian:
            decay = jnp.exp((iou_max * iou_max - iou * iou) * sigma)
        else:
            # NOTE: in T; Paddle divides in double and rounds to T, which can differ in the last bit.
            decay = (1 - iou) / (1 - iou_max)
        min_decay = jnp.min(jnp.where(earlier & ~jnp.isnan(decay), decay, 1), axis=-1, initial=1)
        return _set(iou_max, max_i.astype(dt), i, -1), _set(decayed, min_decay * _at(scores, i, -1), i, -1)

    zeros = jnp.zeros(valid.shape, dt)
    _, decayed = lax.fori_loop(0, _prefix_steps(valid), step, (zeros, zeros))
    return decayed


@lowering("pd_op.matrix_nms")
def matrix_nms(
    bboxes,
    scores,
    *,
    score_threshold,
    nms_top_k,
    keep_top_k,
    post_threshold=0.0,
    use_gaussian=False,
    gaussian_sigma=2.0,
    background_label=0,
    normalized=True,
):
    _check_nms_inputs("matrix_nms", bboxes, scores)
    n, c, m = scores.shape
    top, ids, boxes, valid = _candidates(bboxes, scores, score_threshold, nms_top_k, background_label)
    decayed = _matrix_decay(boxes, valid, top, use_gaussian, gaussian_sigma, normalized)
    selected = valid & (decayed > jnp.asarray(post_threshold, decayed.dtype))
    labels, offsets, flat_boxes = _flat_detections(ids, boxes, m)
    selected, decayed = selected.reshape(n, -1), decayed.reshape(n, -1)
    rows = keep_top_k if keep_top_k > -1 else selected.shape[1]
    # NOTE: matrix_nms orders an image's detections by decayed score over all classes. Paddle's
    # std::partial_sort leaves equal scores in no fixed order; here they stay in class, then score order.
    return _pack(selected, labels, decayed, flat_boxes, offsets, rows, key=decayed)


# ---------------------------------------------------------------------------------------------------------
# Box decoding and anchors


def _sigmoid(x):
    # NOTE: in T throughout; Paddle adds and divides in double and rounds once, a last-bit difference.
    return 1 / (1 + jnp.exp(-x))


@lowering("pd_op.yolo_box")
def yolo_box(
    x,
    img_size,
    *,
    anchors,
    class_num,
    conf_thresh,
    downsample_ratio,
    clip_bbox=True,
    scale_x_y=1.0,
    iou_aware=False,
    iou_aware_factor=0.5,
):
    n, _, h, w = x.shape
    dt = x.dtype
    an = len(anchors) // 2
    if iou_aware:
        # NOTE: iou-aware heads put one IoU logit per anchor in front of the usual per-anchor blocks.
        iou, x = x[:, :an], x[:, an:]
    x = x.reshape(n, an, 5 + class_num, h, w)
    conf = _sigmoid(x[:, :, 4])
    if iou_aware:
        f = np.asarray(iou_aware_factor, np.float32).astype(np.float64)
        conf = conf ** np.asarray(1.0 - f, dt) * _sigmoid(iou) ** np.asarray(f, dt)
    img_h = img_size[:, 0].astype(dt)[:, None, None, None]
    img_w = img_size[:, 1].astype(dt)[:, None, None, None]
    scale = np.float32(scale_x_y)
    bias = np.asarray(np.float32(-0.5) * (scale - np.float32(1)), dt)
    scale = np.asarray(scale, dt)
    gx = jnp.arange(w, dtype=dt)[None, None, None, :]
    gy = jnp.arange(h, dtype=dt)[None, None, :, None]
    aw = np.asarray(anchors[0::2], dt)[None, :, None, None]
    ah = np.asarray(anchors[1::2], dt)[None, :, None, None]
    cx = (gx + _sigmoid(x[:, :, 0]) * scale + bias) * img_w / np.asarray(w, dt)
    cy = (gy + _sigmoid(x[:, :, 1]) * scale + bias) * img_h / np.asarray(h, dt)
    bw = jnp.exp(x[:, :, 2]) * aw * img_w / np.asarray(downsample_ratio * w, dt)
    bh = jnp.exp(x[:, :, 3]) * ah * img_h / np.asarray(downsample_ratio * h, dt)
    x1, y1, x2, y2 = cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2
    if clip_bbox:
        x1, y1 = jnp.where(x1 > 0, x1, 0), jnp.where(y1 > 0, y1, 0)
        x2 = jnp.where(x2 < img_w - 1, x2, img_w - 1)
        y2 = jnp.where(y2 < img_h - 1, y2, img_h - 1)
    # NOTE: `not conf < thresh`: Paddle skips a cell only when its confidence is below the threshold, and
    # a skipped cell's box and scores stay 0.
    live = ~(conf < np.asarray(np.float32(conf_thresh), dt))
    boxes = jnp.where(live[..., None], jnp.stack([x1, y1, x2, y2], axis=-1), 0)
    scores = jnp.where(live[:, :, None], conf[:, :, None] * _sigmoid(x[:, :, 5:]), 0)
    # NOTE: Paddle's box order is anchor, then row, then column.
    boxes = boxes.reshape(n, an * h * w, 4)
    scores = jnp.moveaxis(scores, 2, -1).reshape(n, an * h * w, class_num)
    return boxes, scores


def _expand_aspect_ratios(aspect_ratios, flip):
    """Paddle's ExpandAspectRatios: 1 first, then each new ratio (and its inverse when flip)."""
    out = [np.float32(1)]
    for ar in (np.float32(a) for a in aspect_ratios):
        if all(np.abs(ar - e) >= np.float32(1e-6) for e in out):
            out.append(ar)
            if flip:
                out.append(np.float32(1) / ar)
    return out


def _prior_sizes(min_sizes, max_sizes, aspect_ratios, flip, min_max_aspect_ratios_order):
    """Each prior's (half width, half height), in Paddle's order, computed in float32 as its kernel does."""
    ratios = _expand_aspect_ratios(aspect_ratios, flip)
    half = np.float32(2)
    sizes = []
    for s, min_size in enumerate(np.float32(v) for v in min_sizes):
        square = [(min_size / half, min_size / half)]
        big = []
        if max_sizes:
            side = np.sqrt(min_size * np.float32(max_sizes[s])) / half
            big = [(side, side)]
        ratio = [(min_size * np.sqrt(ar) / half, min_size / np.sqrt(ar) / half) for ar in ratios]
        if min_max_aspect_ratios_order:
            sizes += square + big + [r for r, ar in zip(ratio, ratios) if abs(np.float64(ar) - 1.0) >= 1e-6]
        else:
            sizes += ratio + big
    return np.asarray(sizes, np.float32)


@lowering("pd_op.prior_box")
def prior_box(
    input,
    image,
    *,
    min_sizes,
    max_sizes=(),
    aspect_ratios=(),
    variances=(),
    flip=False,
    clip=False,
    step_w=0.0,
    step_h=0.0,
    offset=0.5,
    min_max_aspect_ratios_order=False,
):
    # NOTE: the priors depend only on the two inputs' shapes, so they are a NumPy constant.
    dt = np.dtype(input.dtype)
    fh, fw = np.shape(input)[2:]
    ih, iw = np.shape(image)[2:]
    if np.float32(step_w) == 0 or np.float32(step_h) == 0:
        sw, sh = dt.type(iw) / dt.type(fw), dt.type(ih) / dt.type(fh)
    else:
        sw, sh = dt.type(np.float32(step_w)), dt.type(np.float32(step_h))
    off = dt.type(np.float32(offset))
    cx = ((np.arange(fw, dtype=dt) + off) * sw)[None, :, None]
    cy = ((np.arange(fh, dtype=dt) + off) * sh)[:, None, None]
    sizes = _prior_sizes(min_sizes, max_sizes, aspect_ratios, flip, min_max_aspect_ratios_order).astype(dt)
    bw, bh = sizes[:, 0], sizes[:, 1]
    iw, ih = dt.type(iw), dt.type(ih)
    boxes = np.stack(np.broadcast_arrays((cx - bw) / iw, (cy - bh) / ih, (cx + bw) / iw, (cy + bh) / ih), -1)
    if clip:
        boxes = np.clip(boxes, 0, 1)
    var = np.broadcast_to(np.asarray(np.float32(variances), dt), boxes.shape[:-1] + (len(variances),))
    return boxes.astype(dt), np.ascontiguousarray(var)


def _center_size(b, one):
    """(center x, center y, width, height) of corner boxes, Paddle's box_coder way (pixel boxes add 1)."""
    w = b[..., 2] - b[..., 0] + one
    h = b[..., 3] - b[..., 1] + one
    return b[..., 0] + w / 2, b[..., 1] + h / 2, w, h


@lowering("pd_op.box_coder")
def box_coder(
    prior_box, prior_box_var, target_box, *, code_type="encode_center_size", box_normalized=True, axis=0, variance=()
):
    one = 0 if box_normalized else 1
    dt = target_box.dtype
    if code_type == "encode_center_size":
        return _encode_center_size(prior_box, prior_box_var, target_box, one, variance, dt)
    if code_type == "decode_center_size":
        return _decode_center_size(prior_box, prior_box_var, target_box, one, axis, variance, dt)
    raise ValueError(f"box_coder code_type {code_type!r} is not encode_center_size or decode_center_size")


def _encode_center_size(prior_box, prior_box_var, target_box, one, variance, dt):
    """target [R, 4] against priors [M, 4] -> offsets [R, M, 4]."""
    pcx, pcy, pw, ph = (v[None, :] for v in _center_size(prior_box, one))
    t = target_box[:, None, :]
    tcx, tcy = (t[..., 2] + t[..., 0]) / 2, (t[..., 3] + t[..., 1]) / 2
    tw, th = t[..., 2] - t[..., 0] + one, t[..., 3] - t[..., 1] + one
    out = jnp.stack([(tcx - pcx) / pw, (tcy - pcy) / ph, jnp.log(jnp.abs(tw / pw)), jnp.log(jnp.abs(th / ph))], axis=-1)
    if prior_box_var is not None:
        return out / prior_box_var[None, :, :4]
    if len(variance):
        return out / np.asarray(np.float32(variance), dt)
    return out


def _decode_center_size(prior_box, prior_box_var, target_box, one, axis, variance, dt):
    """offsets [R, M, 4] from priors [M, 4] (axis 0) or [R, 4] (axis 1) -> boxes [R, M, 4]."""
    expand = (lambda v: v[None]) if axis == 0 else (lambda v: v[:, None])
    pcx, pcy, pw, ph = (expand(v) for v in _center_size(prior_box, one))
    if prior_box_var is not None:
        var = expand(prior_box_var)
    elif len(variance):
        # NOTE: Paddle's kernel reads the float attribute's memory as T; for float64 boxes that is garbage
        # in Paddle, while this uses the values.
        var = np.asarray(np.float32(variance), dt)
    else:
        var = np.ones(4, dt)
    t = target_box
    cx = var[..., 0] * t[..., 0] * pw + pcx
    cy = var[..., 1] * t[..., 1] * ph + pcy
    w = jnp.exp(var[..., 2] * t[..., 2]) * pw
    h = jnp.exp(var[..., 3] * t[..., 3]) * ph
    return jnp.stack([cx - w / 2, cy - h / 2, cx + w / 2 - one, cy + h / 2 - one], axis=-1)


# ---------------------------------------------------------------------------------------------------------
# RoIAlign


def _roi_batch_ids(boxes_num, rois, batch):
    """Which image each RoI belongs to: boxes_num counts RoIs per image, in order."""
    if boxes_num is None:
        if batch != 1:
            raise ValueError("roi_align without boxes_num (a LoD tensor in Paddle) needs a batch of one image")
        return jnp.zeros((rois,), jnp.int32)
    ends = jnp.cumsum(boxes_num.astype(jnp.int32))
    return jnp.searchsorted(ends, jnp.arange(rois, dtype=jnp.int32), side="right").astype(jnp.int32)


def _grid_axis(start, bin_size, grid, pooled, i, limit):
    """Sample i of every bin along one axis, clamped as Paddle's GetIndexesAndRatios does: the low and
    high pixel, the low pixel's weight, and whether the sample is used (on the map, i < grid).
    start, bin_size, grid [R] -> each [R, pooled]."""
    dt = start.dtype
    within = (i.astype(dt) + np.asarray(0.5, dt)) / grid.astype(dt)
    pos = start[:, None] + bin_size[:, None] * (jnp.arange(pooled, dtype=dt)[None, :] + within[:, None])
    used = ~((pos < -1.0) | (pos > limit)) & (i < grid)[:, None]
    pos = jnp.where(pos <= 0, jnp.zeros_like(pos), pos)
    low = jnp.floor(pos).astype(jnp.int32)
    edge = low >= limit - 1
    low = jnp.where(edge, limit - 1, low)
    high = jnp.where(edge, low, low + 1)
    pos = jnp.where(edge, low.astype(dt), pos)
    return low, high, high.astype(dt) - pos, used


def _bilinear(feat, y, x):
    """One sample per bin: feat [R, H, W, C], y and x from _grid_axis -> [R, ph, pw, C] (0 where unused)."""
    (yl, yh, wy, y_used), (xl, xh, wx, x_used) = y, x
    yl, yh, wy, y_used = (a[:, :, None] for a in (yl, yh, wy, y_used))
    xl, xh, wx, x_used = (a[:, None, :] for a in (xl, xh, wx, x_used))
    rois = jnp.arange(feat.shape[0])[:, None, None]
    # NOTE: Paddle's weights and summation order: (x low, y low), (x high, y low), (x low, y high),
    # (x high, y high); float sums in another order round differently.
    taps = [(wx * wy, yl, xl), ((1 - wx) * wy, yl, xh), (wx * (1 - wy), yh, xl), ((1 - wx) * (1 - wy), yh, xh)]
    val = None
    for weight, yi, xi in taps:
        v = weight[..., None] * feat[rois, yi, xi]
        val = v if val is None else val + v
    return jnp.where((y_used & x_used)[..., None], val, jnp.zeros_like(val))


@lowering("pd_op.roi_align")
def roi_align(
    x, boxes, boxes_num=None, *, pooled_height, pooled_width, spatial_scale=1.0, sampling_ratio=-1, aligned=False
):
    n, c, h, w = x.shape
    dt = x.dtype
    r = boxes.shape[0]
    shift = np.asarray(0.5 if aligned else 0, dt)
    corners = boxes * np.asarray(np.float32(spatial_scale), dt) - shift
    x0, y0 = corners[:, 0], corners[:, 1]
    roi_w, roi_h = corners[:, 2] - x0, corners[:, 3] - y0
    if not aligned:
        roi_w, roi_h = jnp.maximum(roi_w, 1), jnp.maximum(roi_h, 1)
    ph, pw = np.asarray(pooled_height, dt), np.asarray(pooled_width, dt)
    if sampling_ratio > 0:
        grid_h = grid_w = jnp.full((r,), sampling_ratio, jnp.int32)
    else:
        # NOTE: the adaptive grid (ceil(RoI size / bins) samples per bin) varies per RoI; the loops below run
        # to the largest and mask the rest, so each bin still sums its own samples in Paddle's order.
        grid_h = jnp.maximum(jnp.ceil(roi_h / ph), 0).astype(jnp.int32)
        grid_w = jnp.maximum(jnp.ceil(roi_w / pw), 0).astype(jnp.int32)
    feat = jnp.moveaxis(x, 1, -1)[_roi_batch_ids(boxes_num, r, n)]  # [R, H, W, C]

    bin_h, bin_w = roi_h / ph, roi_w / pw

    def over_x(iy, total):
        y = _grid_axis(y0, bin_h, grid_h, pooled_height, iy, h)

        def add_sample(ix, t):
            return t + _bilinear(feat, y, _grid_axis(x0, bin_w, grid_w, pooled_width, ix, w))

        return lax.fori_loop(0, jnp.max(grid_w, initial=0), add_sample, total)

    total = jnp.zeros((r, pooled_height, pooled_width, c), dt)
    total = lax.fori_loop(0, jnp.max(grid_h, initial=0), over_x, total)
    # NOTE: Paddle multiplies the sum by 1 / count rather than dividing it by the count.
    count = 1 / (grid_h * grid_w).astype(dt)
    return jnp.moveaxis(total * count[:, None, None, None], -1, 1)


# ---------------------------------------------------------------------------------------------------------
# Two-stage detectors: region proposals (RPN) and their FPN levels

_BBOX_CLIP = np.log(1000.0 / 16.0)


def _decode_proposals(anchors, deltas, variances, offset):
    """generate_proposals' BoxCoder: deltas against anchors scaled by variances, the log-size deltas capped
    at log(1000 / 16). All [..., 4]; offset is 1 for pixel boxes (pixel_offset), else 0."""
    dt = deltas.dtype
    aw = anchors[..., 2] - anchors[..., 0] + offset
    ah = anchors[..., 3] - anchors[..., 1] + offset
    half = np.asarray(0.5, dt)
    acx, acy = anchors[..., 0] + half * aw, anchors[..., 1] + half * ah
    cx = variances[..., 0] * deltas[..., 0] * aw + acx
    cy = variances[..., 1] * deltas[..., 1] * ah + acy
    clip = np.asarray(_BBOX_CLIP, dt)
    w = jnp.exp(jnp.minimum(variances[..., 2] * deltas[..., 2], clip)) * aw
    h = jnp.exp(jnp.minimum(variances[..., 3] * deltas[..., 3], clip)) * ah
    two = np.asarray(2, dt)
    return jnp.stack([cx - w / two, cy - h / two, cx + w / two - offset, cy + h / two - offset], axis=-1)


def _clip_to_image(boxes, im_h, im_w, offset):
    """Paddle's ClipTiledBoxes: x in [0, width - offset], y in [0, height - offset]. im_h, im_w [N, 1]."""

    def clamp(v, high):
        # NOTE: std::max(std::min(v, high), 0) written out, so a NaN coordinate stays NaN as in Paddle.
        v = jnp.where(high < v, high, v)
        return jnp.where(v < 0, jnp.zeros_like(v), v)

    x_high, y_high = im_w - offset, im_h - offset
    highs = (x_high, y_high, x_high, y_high)
    return jnp.stack([clamp(boxes[..., i], high) for i, high in enumerate(highs)], axis=-1)


def _big_enough(boxes, im_h, im_w, min_size, offset, pixel_offset):
    """Paddle's FilterBoxes: both sides at least max(min_size, 1); pixel boxes also need their center on the
    image."""
    dt = boxes.dtype
    least = np.asarray(max(np.float32(min_size), np.float32(1)), dt)
    ws = boxes[..., 2] - boxes[..., 0] + offset
    hs = boxes[..., 3] - boxes[..., 1] + offset
    keep = (ws >= least) & (hs >= least)
    if pixel_offset:
        two = np.asarray(2, dt)
        keep = keep & (boxes[..., 0] + ws / two <= im_w) & (boxes[..., 1] + hs / two <= im_h)
    return keep


def _first(flags, *arrays):
    """Reorder axis 1 of each array so the rows where flags [N, K] is true come first, in order."""
    order = jnp.argsort(~flags, axis=1, stable=True)
    return [jnp.take_along_axis(a, order.reshape(order.shape + (1,) * (a.ndim - 2)), axis=1) for a in (flags,) + arrays]


def _concat_images(per_image, counts):
    """Per-image rows [N, R, ...] of which the first counts[i] are valid -> [N * R, ...]: the valid rows of
    every image back to back, in image order (Paddle's tensor), then zero rows."""
    n, r = per_image.shape[:2]
    ends = jnp.cumsum(counts)
    row = jnp.arange(n * r, dtype=counts.dtype)
    image = jnp.searchsorted(ends, row, side="right").astype(counts.dtype)
    valid = image < n
    image = jnp.minimum(image, n - 1)
    within = jnp.clip(row - (ends - counts)[image], 0, r - 1)
    got = per_image[image, within]
    return jnp.where(valid.reshape(valid.shape + (1,) * (got.ndim - 1)), got, jnp.zeros_like(got))


@lowering("pd_op.generate_proposals")
def generate_proposals(
    scores,
    bbox_deltas,
    im_shape,
    anchors,
    variances,
    *,
    pre_nms_top_n=6000,
    post_nms_top_n=1000,
    nms_thresh=0.5,
    min_size=0.1,
    eta=1.0,
    pixel_offset=True,
):
    n = scores.shape[0]
    dt = scores.dtype
    # NOTE: Paddle lists an image's anchors row, then column, then anchor: scores [N, A, H, W] and deltas
    # [N, 4A, H, W] transposed to channels last, the order of anchors and variances [H, W, A, 4].
    scores = jnp.transpose(scores, (0, 2, 3, 1)).reshape(n, -1)
    deltas = jnp.transpose(bbox_deltas, (0, 2, 3, 1)).reshape(n, -1, 4)
    anchors, variances = anchors.reshape(-1, 4), variances.reshape(-1, 4)
    k = scores.shape[1]
    p = k if pre_nms_top_n <= 0 or pre_nms_top_n >= k else pre_nms_top_n
    # NOTE: Paddle takes the pre_nms_top_n best with std::nth_element (all, std::sort-ed, when it is <= 0 or
    # covers every anchor). Both leave equal scores in no fixed order; lax.top_k puts them in anchor order.
    top, ids = lax.top_k(scores, p)
    offset = np.asarray(1 if pixel_offset else 0, dt)
    deltas = jnp.take_along_axis(deltas, ids[..., None], axis=1)
    boxes = _decode_proposals(anchors[ids], deltas, variances[ids], offset)
    im_h, im_w = im_shape[:, 0:1].astype(dt), im_shape[:, 1:2].astype(dt)
    boxes = _clip_to_image(boxes, im_h, im_w, offset)
    valid, boxes, top = _first(_big_enough(boxes, im_h, im_w, min_size, offset, pixel_offset), boxes, top)
    if nms_thresh <= 0:
        # NOTE: Paddle skips NMS and post_nms_top_n then, returning every box that passed the size filter
        # in its pre-NMS order (std::nth_element's when pre_nms_top_n < the anchors; here best first).
        kept, rows = valid, p
    else:
        # NOTE: Paddle's NMS here treats pixel boxes (pixel_offset) as not normalized: +1 in areas.
        kept = _greedy_nms(boxes, valid, nms_thresh, eta, not pixel_offset)
        rows = p if post_nms_top_n <= 0 else min(post_nms_top_n, p)
    kept, boxes, top = (a[:, :rows] for a in _first(kept, boxes, top))
    found = jnp.sum(kept, axis=1, dtype=jnp.int32)
    # NOTE: an image with no box left after the size filter gets one row in Paddle: box 0, score 0.
    counts = jnp.maximum(found, 1)
    boxes = jnp.where(kept[..., None], boxes, jnp.zeros_like(boxes))
    top = jnp.where(kept, top, jnp.zeros_like(top))
    # NOTE: rows: min(post_nms_top_n, pre-NMS candidates) per image, the most Paddle can return. Laid out
    # as Paddle's tensor then padding, not padded per image, since rpn_rois_num splits rows for the ops
    # downstream (distribute_fpn_proposals, roi_align).
    return _concat_images(boxes, counts), _concat_images(top[..., None], counts), counts


def _fpn_levels(rois, min_level, max_level, refer_level, refer_scale, pixel_offset):
    """Paddle's level of each RoI: floor(log2(sqrt(area) / refer_scale + 1e-6) + refer_level), clamped."""
    dt = rois.dtype
    scale = jnp.sqrt(_area(rois, normalized=not pixel_offset))
    level = jnp.floor(
        jnp.log2(scale / np.asarray(refer_scale, dt) + np.asarray(1e-6, dt)) + np.asarray(refer_level, dt)
    )
    return jnp.clip(level, min_level, max_level).astype(jnp.int32) - min_level


@lowering("pd_op.distribute_fpn_proposals")
def distribute_fpn_proposals(
    fpn_rois, rois_num=None, *, min_level, max_level, refer_level, refer_scale, pixel_offset=False
):
    r = fpn_rois.shape[0]
    levels = max_level - min_level + 1
    if rois_num is None:
        counts = jnp.full((1,), r, jnp.int32)
    else:
        counts = rois_num.astype(jnp.int32)
    n = counts.shape[0]
    row = jnp.arange(r, dtype=jnp.int32)
    # NOTE: Paddle reads only the first sum(rois_num) rows (rois_num splits them into images); the rest,
    # padding from generate_proposals here, go to no level.
    image = jnp.searchsorted(jnp.cumsum(counts), row, side="right").astype(jnp.int32)
    real = image < n
    level = jnp.where(real, _fpn_levels(fpn_rois, min_level, max_level, refer_level, refer_scale, pixel_offset), levels)
    # NOTE: padding rows of restore_index point into the last level's padding ((levels - 1) * R + row is
    # past that level's valid rows, since they number at most sum(rois_num) <= row).
    restore = (levels - 1) * r + row
    multi_rois, multi_num = [], []
    for lv in range(levels):
        here = level == lv
        _, rois = _first(here[None], fpn_rois[None])
        # NOTE: a level's rows keep the input order (image by image), as Paddle appends them.
        multi_rois.append(jnp.where((row < jnp.sum(here))[:, None], rois[0], jnp.zeros_like(rois[0])))
        multi_num.append(jnp.sum(here[None, :] & (image[None, :] == jnp.arange(n)[:, None]), axis=1, dtype=jnp.int32))
        # NOTE: Paddle's restore_index[row] is the RoI's row in the levels' outputs concatenated, which is how
        # its graphs use it: gather(concat(per-level roi features), restore_index). The levels are padded
        # to R rows each here, so that row is level * R + place in level, not Paddle's value (Paddle's
        # offsets the place by the earlier levels' valid counts instead); the gather gives Paddle's result.
        restore = jnp.where(here, lv * r + jnp.cumsum(here, dtype=jnp.int32) - 1, restore)
    return multi_rois, multi_num, restore[:, None]
