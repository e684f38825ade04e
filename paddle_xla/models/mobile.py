"""Paddle's most-deployed mobile CPU models, as plain paddle.nn code, for benchmarking paddle_xla against
Paddle Inference and for parity tests. Weights are freshly (seeded) initialised; no checkpoint is loaded.

- ``pp_lcnet``: PP-LCNet x1.0 image classifier, architecture after PaddleClas PPLCNet
  (ppcls/arch/backbone/legendary_models/pp_lcnet.py).
- ``picodet_s``: PicoDet-S (320) detector up to the raw head outputs, architecture after PaddleDetection
  PicoDet (configs/picodet/picodet_s_320_coco_lcnet.yml: LCNet x0.75 backbone, LCPAN neck, PicoHeadV2).
- ``ppocr_det``: PP-OCR's DB text detector, architecture after PaddleOCR DB (the PP-OCRv2 mobile det
  student: MobileNetV3-large x0.5 without SE, DBFPN neck, DBHead; PP-OCRv3 swaps the neck for RSEFPN).
- ``ppocr_rec``: PP-OCR's CRNN-style text recogniser, architecture after PaddleOCR CRNN: PP-OCRv3's
  MobileNetV1Enhance x0.5 backbone (48x320 input, last stride (1, 2), average pool), Im2Seq, PP-OCRv2's
  2-layer BiLSTM neck (hidden 64; v3/v4 use an SVTR block there), CTC head over the 6625-class charset.

``mobile_model(name, batch)`` builds one (eval mode) with its input specs and seeded inputs;
``MOBILE_MACS[name]`` is its multiply-add count per image, counted from the layers (``count_macs``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import paddle
import paddle.nn as nn
import paddle.nn.functional as F
from paddle.static import InputSpec

__all__ = [
    "pp_lcnet",
    "picodet_s_head",
    "ppocr_db_det",
    "ppocr_crnn_rec",
    "mobile_model",
    "count_macs",
    "calibrate_batchnorm",
    "MOBILE_MACS",
    "MOBILE_NAMES",
]


def make_divisible(v, divisor=8):
    """Round a scaled channel count to a multiple of 8, never dropping more than 10% (the rule
    PaddleClas / PaddleOCR use, so the x0.75 / x0.5 widths match theirs)."""
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


def _act(name):
    return {"hardswish": nn.Hardswish, "relu": nn.ReLU, None: nn.Identity}[name]()


# ---------------------------------------------------------------------------------------------------
# Shared building blocks
# ---------------------------------------------------------------------------------------------------


class ConvBNLayer(nn.Layer):
    """Bias-free conv + BatchNorm + activation: the unit every model here is built from (the BN
    carries the bias)."""

    def __init__(self, cin, cout, k, stride=1, groups=1, act="hardswish"):
        super().__init__()
        self.conv = nn.Conv2D(cin, cout, k, stride=stride, padding=(k - 1) // 2, groups=groups, bias_attr=False)
        self.bn = nn.BatchNorm2D(cout)
        self.act = _act(act)

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class SEModule(nn.Layer):
    """Squeeze-and-excitation: GAP, 1x1 reduce (ReLU), 1x1 expand, hard-sigmoid gate. Hard-sigmoid
    (slope 1/6) rather than sigmoid because it is cheap on mobile CPUs."""

    def __init__(self, channels, reduction=4):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2D(1)
        self.reduce = nn.Conv2D(channels, channels // reduction, 1)
        self.expand = nn.Conv2D(channels // reduction, channels, 1)

    def forward(self, x):
        w = self.expand(F.relu(self.reduce(self.pool(x))))
        return x * F.hardsigmoid(w)


class DepthwiseSeparable(nn.Layer):
    """Depthwise kxk conv (carries the stride) -> optional SE -> pointwise 1x1 conv, both hard-swish.
    SE sits between the two, gating the depthwise output before channels are mixed."""

    def __init__(self, cin, cout, k=3, stride=1, use_se=False):
        super().__init__()
        self.dw = ConvBNLayer(cin, cin, k, stride=stride, groups=cin)
        self.se = SEModule(cin) if use_se else nn.Identity()
        self.pw = ConvBNLayer(cin, cout, 1)

    def forward(self, x):
        return self.pw(self.se(self.dw(x)))


# ---------------------------------------------------------------------------------------------------
# 1. PP-LCNet (PaddleClas)
# ---------------------------------------------------------------------------------------------------

# Per block: depthwise kernel, in channels, out channels, stride, SE. 5x5 kernels and SE only in the
# late, low-resolution stages, where they add accuracy for little latency (the PP-LCNet paper's point).
LCNET_CONFIG = {
    "blocks2": [(3, 16, 32, 1, False)],
    "blocks3": [(3, 32, 64, 2, False), (3, 64, 64, 1, False)],
    "blocks4": [(3, 64, 128, 2, False), (3, 128, 128, 1, False)],
    "blocks5": [(3, 128, 256, 2, False)] + [(5, 256, 256, 1, False)] * 5,
    "blocks6": [(5, 256, 512, 2, True), (5, 512, 512, 1, True)],
}


class LCNetBackbone(nn.Layer):
    """Stem (3x3 s2) + blocks2..blocks6; returns the outputs of blocks4/5/6 (strides 8/16/32)."""

    def __init__(self, scale=1.0):
        super().__init__()
        self.stem = ConvBNLayer(3, make_divisible(16 * scale), 3, stride=2)
        for name, cfg in LCNET_CONFIG.items():
            blocks = [
                DepthwiseSeparable(make_divisible(cin * scale), make_divisible(cout * scale), k, s, se)
                for k, cin, cout, s, se in cfg
            ]
            setattr(self, name, nn.Sequential(*blocks))
        self.out_channels = [make_divisible(LCNET_CONFIG[b][-1][2] * scale) for b in ("blocks4", "blocks5", "blocks6")]

    def forward(self, x):
        x = self.blocks3(self.blocks2(self.stem(x)))
        c3 = self.blocks4(x)
        c4 = self.blocks5(c3)
        c5 = self.blocks6(c4)
        return [c3, c4, c5]


class PPLCNet(nn.Layer):
    """Classifier: backbone, GAP, then a 1x1 "last conv" to 1280 channels (hard-swish) that widens the
    pooled feature cheaply (it runs on a 1x1 map), dropout, FC."""

    def __init__(self, scale=1.0, num_classes=1000, class_expand=1280, dropout=0.2):
        super().__init__()
        self.backbone = LCNetBackbone(scale)
        self.pool = nn.AdaptiveAvgPool2D(1)
        self.last_conv = nn.Conv2D(self.backbone.out_channels[-1], class_expand, 1, bias_attr=False)
        self.act = nn.Hardswish()
        # NOTE: PaddleClas uses "downscale_in_infer": eval multiplies by (1 - p) instead of training
        # scaling by 1 / (1 - p); kept so eval outputs match theirs.
        self.dropout = nn.Dropout(dropout, mode="downscale_in_infer")
        self.fc = nn.Linear(class_expand, num_classes)

    def forward(self, x):
        x = self.pool(self.backbone(x)[-1])
        x = self.dropout(self.act(self.last_conv(x)))
        return self.fc(paddle.flatten(x, 1))


def pp_lcnet(scale=1.0, num_classes=1000):
    return PPLCNet(scale, num_classes)


# ---------------------------------------------------------------------------------------------------
# 2. PicoDet-S (PaddleDetection), no post-processing
# ---------------------------------------------------------------------------------------------------


class DPModule(nn.Layer):
    """kxk conv with groups = cout (depthwise when cin == cout) + BN + act, then 1x1 conv + BN
    (+ act unless `act_out` is off). PicoDet's cheap strided downsampler."""

    def __init__(self, cin, cout, k=5, stride=1, act_out=True):
        super().__init__()
        self.dw = ConvBNLayer(cin, cout, k, stride=stride, groups=cout)
        self.pw = ConvBNLayer(cout, cout, 1, act="hardswish" if act_out else None)

    def forward(self, x):
        return self.pw(self.dw(x))


class LCPAN(nn.Layer):
    """CSP-PAN-style neck with LCNet blocks: 1x1 channel reduction of each level to `ch`, a top-down
    path (nearest x2 upsample, concat, two 5x5 depthwise-separable blocks), a bottom-up path (5x5 s2
    DPModule downsample, concat, two blocks), and an extra stride-64 level for large objects."""

    def __init__(self, in_channels, ch=96, k=5):
        super().__init__()
        self.reduce = nn.LayerList([ConvBNLayer(c, ch, 1) for c in in_channels])
        n = len(in_channels)

        def fuse():  # concat of two ch-wide maps back down to ch
            return nn.Sequential(DepthwiseSeparable(2 * ch, 2 * ch, k), DepthwiseSeparable(2 * ch, ch, k))

        self.top_down = nn.LayerList([fuse() for _ in range(n - 1)])
        self.downsample = nn.LayerList([DPModule(ch, ch, k, stride=2) for _ in range(n - 1)])
        self.bottom_up = nn.LayerList([fuse() for _ in range(n - 1)])
        self.top_from_input = DPModule(ch, ch, k, stride=2)
        self.top_from_output = DPModule(ch, ch, k, stride=2)

    def forward(self, feats):
        feats = [conv(f) for conv, f in zip(self.reduce, feats)]
        inner = [feats[-1]]
        for i, idx in enumerate(range(len(feats) - 1, 0, -1)):
            up = F.interpolate(inner[0], scale_factor=2, mode="nearest")
            inner.insert(0, self.top_down[i](paddle.concat([up, feats[idx - 1]], axis=1)))
        outs = [inner[0]]
        for i in range(len(feats) - 1):
            down = self.downsample[i](outs[-1])
            outs.append(self.bottom_up[i](paddle.concat([down, inner[i + 1]], axis=1)))
        outs.append(self.top_from_input(feats[-1]) + self.top_from_output(outs[-1]))
        return outs


class PicoSE(nn.Layer):
    """The head's SE: a sigmoid channel gate from the pooled tower output, then 1x1 conv + BN."""

    def __init__(self, ch):
        super().__init__()
        self.fc = nn.Conv2D(ch, ch, 1)
        self.conv = ConvBNLayer(ch, ch, 1)

    def forward(self, x):
        return self.conv(x * F.sigmoid(self.fc(F.adaptive_avg_pool2d(x, 1))))


class PicoLevelHead(nn.Layer):
    """One level of the GFL-style head. Classification and regression share one tower
    (depthwise 5x5 + pointwise, x num_convs); the SE output feeds both 1x1 predictors, and a separate
    5x5 "alignment" branch on the tower output gives an IoU-like quality that rescales the scores."""

    def __init__(self, ch, num_classes, reg_max, num_convs=2):
        super().__init__()
        self.tower = nn.Sequential(
            *[m for _ in range(num_convs) for m in (ConvBNLayer(ch, ch, 5, groups=ch), ConvBNLayer(ch, ch, 1))]
        )
        self.se = PicoSE(ch)
        # GFL's predictor init: small weights, and a class bias so every score starts at the prior
        # probability 0.01 (keeps the untrained outputs out of sigmoid's saturated tails, too).
        small = paddle.ParamAttr(initializer=nn.initializer.Normal(0.0, 0.01))
        prior = paddle.ParamAttr(initializer=nn.initializer.Constant(-math.log((1 - 0.01) / 0.01)))
        self.cls = nn.Conv2D(ch, num_classes, 1, weight_attr=small, bias_attr=prior)
        self.reg = nn.Conv2D(ch, 4 * (reg_max + 1), 1, weight_attr=small)
        self.align = DPModule(ch, 1, 5, act_out=False)

    def forward(self, x):
        feat = self.tower(x)
        se_feat = self.se(feat)
        # Score = geometric mean of class probability and alignment quality (eps keeps sqrt's
        # gradient finite at 0).
        score = paddle.sqrt(F.sigmoid(self.cls(se_feat)) * F.sigmoid(self.align(feat)) + 1e-9)
        # [N, C, H, W] -> [N, H*W, C]
        return score.flatten(2).transpose([0, 2, 1]), self.reg(se_feat).flatten(2).transpose([0, 2, 1])


class PicoDetS(nn.Layer):
    """LCNet x0.75 -> LCPAN (96 ch, strides 8/16/32/64) -> per-level heads; outputs cls_scores
    [N, A, num_classes] and the raw box distribution [N, A, 4 * (reg_max + 1)], A = sum(H*W)."""

    def __init__(self, scale=0.75, ch=96, num_classes=80, reg_max=7):
        super().__init__()
        self.backbone = LCNetBackbone(scale)
        self.neck = LCPAN(self.backbone.out_channels, ch)
        self.heads = nn.LayerList([PicoLevelHead(ch, num_classes, reg_max) for _ in range(4)])

    def forward(self, x):
        outs = [head(f) for head, f in zip(self.heads, self.neck(self.backbone(x)))]
        return paddle.concat([o[0] for o in outs], axis=1), paddle.concat([o[1] for o in outs], axis=1)


def picodet_s_head(num_classes=80, reg_max=7):
    return PicoDetS(num_classes=num_classes, reg_max=reg_max)


# ---------------------------------------------------------------------------------------------------
# 3. PP-OCR DB text detector (PaddleOCR)
# ---------------------------------------------------------------------------------------------------

# MobileNetV3-large: kernel, expansion, out channels, activation, stride. SE is disabled, as in the
# PP-OCR mobile det student (SE's global pooling hurts on large, text-dense inputs and costs latency).
MBV3_LARGE = [
    (3, 16, 16, "relu", 1),
    (3, 64, 24, "relu", 2),
    (3, 72, 24, "relu", 1),
    (5, 72, 40, "relu", 2),
    (5, 120, 40, "relu", 1),
    (5, 120, 40, "relu", 1),
    (3, 240, 80, "hardswish", 2),
    (3, 200, 80, "hardswish", 1),
    (3, 184, 80, "hardswish", 1),
    (3, 184, 80, "hardswish", 1),
    (3, 480, 112, "hardswish", 1),
    (3, 672, 112, "hardswish", 1),
    (5, 672, 160, "hardswish", 2),
    (5, 960, 160, "hardswish", 1),
    (5, 960, 160, "hardswish", 1),
]


class InvertedResidual(nn.Layer):
    """1x1 expand -> kxk depthwise (stride) -> 1x1 linear projection; residual when shapes allow."""

    def __init__(self, cin, mid, cout, k, stride, act):
        super().__init__()
        self.expand = ConvBNLayer(cin, mid, 1, act=act)
        self.dw = ConvBNLayer(mid, mid, k, stride=stride, groups=mid, act=act)
        self.project = ConvBNLayer(mid, cout, 1, act=None)
        self.shortcut = stride == 1 and cin == cout

    def forward(self, x):
        y = self.project(self.dw(self.expand(x)))
        return x + y if self.shortcut else y


class MobileNetV3Det(nn.Layer):
    """MobileNetV3-large backbone split into 4 stages ending at strides 4/8/16/32 (a new stage starts at
    each stride-2 block after the first); the last stage ends with a 1x1 conv to 960*scale."""

    def __init__(self, scale=0.5):
        super().__init__()
        cin = make_divisible(16 * scale)
        self.stem = ConvBNLayer(3, cin, 3, stride=2)
        stages, blocks, self.out_channels = [], [], []
        for i, (k, exp, c, act, s) in enumerate(MBV3_LARGE):
            if s == 2 and i > 2:
                stages.append(nn.Sequential(*blocks))
                self.out_channels.append(cin)
                blocks = []
            cout = make_divisible(c * scale)
            blocks.append(InvertedResidual(cin, make_divisible(exp * scale), cout, k, s, act))
            cin = cout
        last = make_divisible(960 * scale)
        blocks.append(ConvBNLayer(cin, last, 1))
        stages.append(nn.Sequential(*blocks))
        self.out_channels.append(last)
        self.stages = nn.LayerList(stages)

    def forward(self, x):
        x = self.stem(x)
        outs = []
        for stage in self.stages:
            x = stage(x)
            outs.append(x)
        return outs


class DBFPN(nn.Layer):
    """1x1 convs to `ch`, top-down sum with nearest x2 upsampling, a 3x3 conv to ch/4 per level, then
    every level upsampled to 1/4 and concatenated (back to `ch` channels). No BN / activation."""

    def __init__(self, in_channels, ch=96):
        super().__init__()
        self.lateral = nn.LayerList([nn.Conv2D(c, ch, 1, bias_attr=False) for c in in_channels])
        self.smooth = nn.LayerList([nn.Conv2D(ch, ch // 4, 3, padding=1, bias_attr=False) for _ in in_channels])

    def forward(self, feats):
        lat = [conv(f) for conv, f in zip(self.lateral, feats)]
        for i in range(len(lat) - 2, -1, -1):  # top-down: 1/32 -> 1/4
            lat[i] = lat[i] + F.interpolate(lat[i + 1], scale_factor=2, mode="nearest")
        outs = []
        for i, (conv, f) in enumerate(zip(self.smooth, lat)):
            p = conv(f)
            outs.append(F.interpolate(p, scale_factor=2**i, mode="nearest") if i else p)
        return paddle.concat(outs[::-1], axis=1)  # coarsest first, as PaddleOCR orders them


class DBHead(nn.Layer):
    """3x3 conv + BN + ReLU, two 2x2 stride-2 transposed convs back to full resolution, sigmoid: the
    shrink (probability) map. The threshold branch only matters in training, so it is left out."""

    def __init__(self, ch=96):
        super().__init__()
        self.conv = ConvBNLayer(ch, ch // 4, 3, act="relu")
        self.up1 = nn.Conv2DTranspose(ch // 4, ch // 4, 2, stride=2)
        self.bn1 = nn.BatchNorm2D(ch // 4)
        self.up2 = nn.Conv2DTranspose(ch // 4, 1, 2, stride=2)

    def forward(self, x):
        x = F.relu(self.bn1(self.up1(self.conv(x))))
        return F.sigmoid(self.up2(x))


class PPOCRDet(nn.Layer):
    def __init__(self, scale=0.5, ch=96):
        super().__init__()
        self.backbone = MobileNetV3Det(scale)
        self.neck = DBFPN(self.backbone.out_channels, ch)
        self.head = DBHead(ch)

    def forward(self, x):
        return self.head(self.neck(self.backbone(x)))


def ppocr_db_det(scale=0.5):
    return PPOCRDet(scale)


# ---------------------------------------------------------------------------------------------------
# 4. PP-OCR CRNN recogniser (PaddleOCR)
# ---------------------------------------------------------------------------------------------------

# MobileNetV1Enhance blocks at x1.0 widths: pointwise out channels, depthwise kernel, stride, SE.
# Strides (2, 1) halve only the height, so a 320-wide line keeps enough columns for the CTC time steps.
MV1E_CONFIG = (
    [
        (64, 3, 1, False),
        (128, 3, 1, False),
        (128, 3, 1, False),
        (256, 3, (2, 1), False),
        (256, 3, 1, False),
        (512, 3, (2, 1), False),
    ]
    + [(512, 5, 1, False)] * 5
    + [
        (1024, 5, (2, 1), True),
        (1024, 5, (1, 2), True),  # PP-OCRv3's last_conv_stride [1, 2]: halve the width instead
    ]
)


class MobileNetV1Enhance(nn.Layer):
    """3x3 s2 stem, 13 depthwise-separable blocks (5x5 and SE in the last ones), 2x2 average pool:
    height 48 -> 1, width 320 -> 40."""

    def __init__(self, scale=0.5):
        super().__init__()
        cin = int(32 * scale)
        self.stem = ConvBNLayer(3, cin, 3, stride=2)
        blocks = []
        for cout, k, s, se in MV1E_CONFIG:
            blocks.append(DepthwiseSeparable(cin, int(cout * scale), k, s, se))
            cin = int(cout * scale)
        self.blocks = nn.Sequential(*blocks)
        self.pool = nn.AvgPool2D(2, 2)
        self.out_channels = cin

    def forward(self, x):
        return self.pool(self.blocks(self.stem(x)))


class CRNN(nn.Layer):
    """Backbone -> Im2Seq ([N, C, 1, W] -> [N, W, C]) -> 2-layer BiLSTM -> Linear to the charset
    (6623 characters + space + CTC blank) -> softmax in eval (CTC decoding stays outside)."""

    def __init__(self, scale=0.5, hidden=64, num_classes=6625):
        super().__init__()
        self.backbone = MobileNetV1Enhance(scale)
        self.rnn = nn.LSTM(self.backbone.out_channels, hidden, num_layers=2, direction="bidirect")
        self.fc = nn.Linear(2 * hidden, num_classes)

    def forward(self, x):
        seq = self.backbone(x).squeeze(2).transpose([0, 2, 1])
        seq, _ = self.rnn(seq)
        logits = self.fc(seq)
        return logits if self.training else F.softmax(logits, axis=2)


def ppocr_crnn_rec(scale=0.5, hidden=64, num_classes=6625):
    return CRNN(scale, hidden, num_classes)


# ---------------------------------------------------------------------------------------------------
# Registry, inputs, MAC counting
# ---------------------------------------------------------------------------------------------------

# name -> (constructor, default input [C, H, W])
_MODELS = {
    "pp_lcnet": (pp_lcnet, (3, 224, 224)),
    "picodet_s": (picodet_s_head, (3, 320, 320)),
    "ppocr_det": (ppocr_db_det, (3, 640, 640)),
    "ppocr_rec": (ppocr_crnn_rec, (3, 48, 320)),
}
MOBILE_NAMES = tuple(_MODELS)


def calibrate_batchnorm(net: nn.Layer, x: np.ndarray) -> None:
    """Set every BatchNorm's running statistics from the input it sees on `x`, layer by layer in eval
    mode: the mean per channel, the variance as the average over the layer's channels.

    Why: freshly initialised BN is the identity, and through ~30 hard-swish layers activations shrink
    ~0.6x per layer (PP-LCNet's logits come out ~1e-19), so a parity check would compare zeros. Why one
    variance per layer: a per-channel variance from a small batch is ~0 for channels hard-swish nearly
    kills, and dividing by it amplifies fp32 rounding ~300x (PicoDet then differs from its own float64
    run by ~1e-3); a shared variance restores the scale without making the net ill-conditioned."""

    def set_stats(layer, inputs):
        h = inputs[0]
        mean = h.mean(axis=[0, 2, 3])
        var = ((h - mean.reshape([1, -1, 1, 1])) ** 2).mean()
        layer._mean.set_value(mean)
        layer._variance.set_value(paddle.full_like(layer._variance, var))

    bns = [m for m in net.sublayers() if isinstance(m, nn.BatchNorm2D)]
    handles = [m.register_forward_pre_hook(set_stats) for m in bns]
    net.eval()
    try:
        with paddle.no_grad():
            net(paddle.to_tensor(x))
    finally:
        for h in handles:
            h.remove()


def mobile_model(name: str, batch: int, seed: int = 0, *, image_size: tuple[int, int] | None = None):
    """(net in eval mode, [InputSpec], [float32 NumPy input]) for one of MOBILE_NAMES.

    Weights are seeded with paddle.seed(seed), BatchNorm statistics are calibrated on a fixed seeded
    batch of 2 (so they do not depend on `batch`), and the input comes from np.random.default_rng(seed).
    image_size (H, W) overrides the default input size (a multiple of 32 for the detectors; the
    recogniser needs height 48 or 32 to reach height 1)."""
    if name not in _MODELS:
        raise ValueError(f"unknown mobile model {name!r}; expected one of {MOBILE_NAMES}")
    build, (c, h, w) = _MODELS[name]
    if image_size is not None:
        h, w = image_size
    paddle.seed(seed)
    net = build()
    rng = np.random.default_rng(seed)
    calibrate_batchnorm(net, rng.standard_normal((2, c, h, w)).astype("float32"))
    specs = [InputSpec([None, c, h, w], "float32", "image")]
    x = rng.standard_normal((batch, c, h, w)).astype("float32")
    return net, specs, [x]


def count_macs(net: nn.Layer, inputs) -> int:
    """Multiply-adds per image, counted by running `net` once with forward hooks on its layers:
    conv kh*kw*cin/groups*cout*Hout*Wout; transposed conv kh*kw*cin/groups*cout*Hin*Win (each input
    pixel scatters a kh x kw x cout patch); linear in*out per row; LSTM 4*(in+hidden)*hidden per step,
    direction and layer (layers above the first read 2*hidden inputs). Elementwise ops, pooling, BN
    (foldable into the conv) and activations are not counted."""
    total = [0]

    def conv(layer, inp, out):
        w = layer.weight.shape  # [cout, cin/groups, kh, kw]
        total[0] += w[0] * w[1] * w[2] * w[3] * out.shape[2] * out.shape[3]

    def conv_t(layer, inp, out):
        w = layer.weight.shape  # [cin, cout/groups, kh, kw]
        x = inp[0]
        total[0] += w[0] * w[1] * w[2] * w[3] * x.shape[2] * x.shape[3]

    def linear(layer, inp, out):
        in_f, out_f = layer.weight.shape
        total[0] += in_f * int(np.prod(out.shape))

    def lstm(layer, inp, out):
        steps = inp[0].shape[0 if layer.time_major else 1]
        h, d = layer.hidden_size, layer.num_directions
        for i in range(layer.num_layers):
            cin = layer.input_size if i == 0 else h * d
            total[0] += 4 * (cin + h) * h * steps * d

    hooks = {nn.Conv2D: conv, nn.Conv2DTranspose: conv_t, nn.Linear: linear, nn.LSTM: lstm}
    handles = [sub.register_forward_post_hook(hooks[type(sub)]) for sub in net.sublayers() if type(sub) in hooks]
    try:
        with paddle.no_grad():
            net(*[paddle.to_tensor(x) for x in inputs])
    finally:
        for h in handles:
            h.remove()
    return total[0] // int(np.shape(inputs[0])[0])


class _MacTable(Mapping):
    """MOBILE_MACS: multiply-adds per image at each model's default input size, counted by count_macs
    at batch 1 the first time a name is looked up (building and running four nets at import would be
    slow), then cached."""

    def __init__(self):
        self._cache = {}

    def __getitem__(self, name):
        if name not in self._cache:
            net, _, inputs = mobile_model(name, batch=1)
            self._cache[name] = count_macs(net, inputs)
        return self._cache[name]

    def __iter__(self):
        return iter(MOBILE_NAMES)

    def __len__(self):
        return len(MOBILE_NAMES)


MOBILE_MACS = _MacTable()
