"""Speech recognition, small: a BiLSTM acoustic model trained with CTC on log-mel features, and a
synthetic "spoken" task generated locally: each symbol is a short tone of its own pitch, an utterance
is a few symbols with silences between, in noise. Nothing is downloaded."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import paddle
import paddle.nn as nn
import paddle.nn.functional as F
from paddle.static import InputSpec

BLANK = 0  # CTC's blank; symbol k is class k + 1


@dataclass(frozen=True)
class SpeechConfig:
    name: str = "small"
    n_symbols: int = 12
    sample_rate: int = 8000
    seconds: float = 1.5
    max_symbols: int = 6
    hop: int = 80  # 10 ms frames
    n_fft: int = 256
    n_mels: int = 40
    hidden: int = 128
    layers: int = 2

    @staticmethod
    def named(name: str) -> SpeechConfig:
        return {
            "small": SpeechConfig(),
            "tiny": SpeechConfig("tiny", n_symbols=6, seconds=0.8, max_symbols=4, n_mels=24, hidden=64, layers=1),
        }[name]

    @property
    def n_samples(self) -> int:
        return int(self.sample_rate * self.seconds)

    @property
    def n_frames(self) -> int:
        return self.n_samples // self.hop + 1  # LogMelSpectrogram pads (center=True)

    def log_mel(self) -> nn.Layer:
        return paddle.audio.features.LogMelSpectrogram(
            sr=self.sample_rate, n_fft=self.n_fft, hop_length=self.hop, n_mels=self.n_mels, f_min=50.0, top_db=80.0
        )


class LSTMCTC(nn.Layer):
    """forward(feats [B, T, n_mels]) -> logits [B, T, n_symbols + 1] (class 0 is CTC's blank)."""

    def __init__(self, cfg: SpeechConfig):
        super().__init__()
        self.norm = nn.LayerNorm(cfg.n_mels)
        self.lstm = nn.LSTM(cfg.n_mels, cfg.hidden, num_layers=cfg.layers, direction="bidirect")
        self.out = nn.Linear(2 * cfg.hidden, cfg.n_symbols + 1)

    def forward(self, feats):
        h, _ = self.lstm(self.norm(feats))
        return self.out(h)

    @staticmethod
    def input_spec(cfg: SpeechConfig, batch: int | None = None):
        return [InputSpec([batch, cfg.n_frames, cfg.n_mels], "float32", "feats")]

    @staticmethod
    def label_spec(cfg: SpeechConfig, batch: int | None = None):
        return [
            InputSpec([batch, cfg.max_symbols], "int32", "labels"),
            InputSpec([batch], "int64", "input_lengths"),
            InputSpec([batch], "int64", "label_lengths"),
        ]


def ctc_loss(logits, labels, input_lengths, label_lengths):
    # NOTE: F.ctc_loss wants time-major [T, B, C] unnormalised scores; it applies the softmax itself.
    return F.ctc_loss(logits.transpose([1, 0, 2]), labels, input_lengths, label_lengths, blank=BLANK)


def greedy_decode(logits: np.ndarray) -> list[list[int]]:
    """Best path: the top class per frame, repeats merged, blanks dropped; symbols from 0."""
    out = []
    for best in logits.argmax(-1):
        keep = (best != BLANK) & np.concatenate([[True], best[1:] != best[:-1]])
        out.append([int(k) - 1 for k in best[keep]])
    return out


def edit_distance(a: list[int], b: list[int]) -> int:
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (x != y))
    return row[-1]


# ---- synthetic audio ---------------------------------------------------------------------------------
@dataclass
class Utterances:
    audio: np.ndarray  # [N, n_samples] float32
    labels: np.ndarray  # [N, max_symbols] int32, symbol + 1, padded with 0
    label_lengths: np.ndarray  # [N] int64

    def symbols(self, i: int) -> list[int]:
        return [int(k) - 1 for k in self.labels[i, : self.label_lengths[i]]]


def tones(cfg: SpeechConfig, n: int, seed: int) -> Utterances:
    """n utterances of 1..max_symbols random symbols. Symbol k is a tone at 300 Hz * 2^(k/3) with a
    soft attack, lasting 60-120 ms, with 40-100 ms of silence around it."""
    rng = np.random.default_rng(seed)
    sr, length = cfg.sample_rate, cfg.n_samples
    audio = (0.02 * rng.standard_normal((n, length))).astype("float32")
    labels = np.zeros((n, cfg.max_symbols), "int32")
    lengths = rng.integers(1, cfg.max_symbols + 1, n)
    for i, count in enumerate(lengths):
        t = int(rng.uniform(0.04, 0.1) * sr)
        for j in range(count):
            dur = int(rng.uniform(0.06, 0.12) * sr)
            if t + dur > length:
                lengths[i] = j
                break
            k = int(rng.integers(cfg.n_symbols))
            ts = np.arange(dur) / sr
            env = np.minimum(1.0, np.minimum(ts, ts[::-1]) / 0.01)
            audio[i, t : t + dur] += rng.uniform(0.3, 1.0) * env * np.sin(2 * np.pi * 300 * 2 ** (k / 3) * ts)
            labels[i, j] = k + 1
            t += dur + int(rng.uniform(0.04, 0.1) * sr)
    return Utterances(audio, labels, lengths.astype("int64"))
