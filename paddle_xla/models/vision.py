"""Image classification: paddle.vision's ResNets, and scikit-learn's bundled handwritten digits
(1,797 8x8 grey images, installed with the package, never downloaded) shaped for them."""

from __future__ import annotations

import numpy as np
import paddle
from paddle.static import InputSpec


def resnet(name: str = "resnet50", num_classes: int = 10) -> paddle.nn.Layer:
    """paddle.vision.models.<name> (resnet18 / 34 / 50 / 101 / 152), freshly initialised."""
    return getattr(paddle.vision.models, name)(num_classes=num_classes)


def input_spec(size: int = 32):
    return [InputSpec([None, 3, size, size], "float32", "image")]


def label_spec():
    return [InputSpec([None, 1], "int64", "label")]


class Digits(paddle.io.Dataset):
    """The digits as 3-channel `size`x`size` images (nearest-neighbour upscaled, normalised), with a
    fixed, shuffled train / test split (1437 / 360 images)."""

    def __init__(self, split: str = "train", size: int = 32, n_test: int = 360, seed: int = 0):
        super().__init__()
        from sklearn.datasets import load_digits

        digits = load_digits()
        if size % 8:
            raise ValueError(f"size={size} must be a multiple of 8 (the digits are 8x8).")
        order = np.random.default_rng(seed).permutation(len(digits.target))
        idx = order[:n_test] if split == "test" else order[n_test:]
        # NOTE: pixel values run 0..16; scale to zero mean, unit variance over the whole set.
        img = (digits.images[idx] - digits.images.mean()) / digits.images.std()
        img = img.repeat(size // 8, axis=1).repeat(size // 8, axis=2)
        self.images = np.repeat(img[:, None], 3, axis=1).astype("float32")
        self.labels = digits.target[idx].astype("int64")[:, None]

    def __getitem__(self, i):
        return self.images[i], self.labels[i]

    def __len__(self):
        return len(self.labels)
