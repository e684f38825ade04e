"""Pretraining data for BERT, made locally: a text corpus that ships with Python (the pydoc topic
pages), a WordPiece tokenizer trained on it with `tokenizers`, NSP sentence pairs, and MLM masking
(15 % of tokens: 80 % [MASK], 10 % random, 10 % kept). Nothing is downloaded."""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass

import numpy as np

from ..errors import PaddleXlaError

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
IGNORE = -100


class DataError(PaddleXlaError):
    """The data does not fit the model: vocabulary, sequence length, or an empty dataset."""


# NOTE: tokenizers and matplotlib are not core dependencies: they come with this extra.
VALIDATE_EXTRA = "pip install 'paddle_xla[validate]'"


def import_validate_extra(module: str, needed_by: str):
    """`import module` (tokenizers, matplotlib), or a ModuleNotFoundError that says what to install."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        top = module.split(".")[0]
        if (e.name or "").split(".")[0] != top:
            raise
        raise ModuleNotFoundError(
            f"{needed_by} needs {top!r}, which is not installed: {VALIDATE_EXTRA}", name=e.name
        ) from None


def corpus_sentences() -> list[str]:
    """English sentences from Python's bundled documentation topics."""
    from pydoc_data.topics import topics

    text = "\n".join(topics[k] for k in sorted(topics))
    parts = re.split(r"(?<=[.!?])\s+|\n\s*\n", text)
    return [" ".join(p.split()) for p in parts if len(p.split()) >= 4]


def train_tokenizer(sentences: list[str], vocab_size: int):
    """A lower-cased WordPiece tokenizer with BERT's special tokens, its vocabulary made from
    `sentences`: the specials, every character (alone and as a "##" continuation), then the most
    frequent words (ties by spelling) up to vocab_size.

    NOTE: not `tokenizers`' own trainer: it breaks ties between equally frequent merges in the order
    of a randomly seeded hash map, so each process trained another vocabulary and `make demo`'s
    final loss moved from run to run (1.29743, then 1.29677). This vocabulary is the same in every
    process; WordPiece tokenization with a fixed vocabulary is deterministic."""
    from collections import Counter

    tokenizers = import_validate_extra("tokenizers", "the BERT WordPiece tokenizer (models/bert_data.py)")
    normalize = tokenizers.normalizers.BertNormalizer(lowercase=True)
    split = tokenizers.pre_tokenizers.BertPreTokenizer()
    words = Counter(w for s in sentences for w, _ in split.pre_tokenize_str(normalize.normalize_str(s)))
    chars = sorted({c for w in words for c in w})
    vocab = list(dict.fromkeys([*SPECIALS, *chars, *(f"##{c}" for c in chars)]))
    room = max(0, vocab_size - len(vocab))
    frequent = [w for w, n in sorted(words.items(), key=lambda kv: (-kv[1], kv[0])) if n >= 2 and len(w) > 1]
    vocab += [w for w in frequent if w not in set(vocab)][:room]
    return tokenizers.BertWordPieceTokenizer({token: i for i, token in enumerate(vocab)}, lowercase=True)


def check_vocab(tokenizer, vocab_size: int) -> None:
    n = tokenizer.get_vocab_size()
    if n > vocab_size:
        raise DataError(
            f"The tokenizer has {n} tokens but the model's embedding has vocab_size={vocab_size}: "
            f"ids >= {vocab_size} would index past the table. Use a config with vocab_size >= {n} "
            "or train the tokenizer with a smaller vocabulary."
        )


@dataclass
class PretrainingBatch:
    input_ids: np.ndarray  # [B, S] int64
    token_type_ids: np.ndarray  # [B, S] int64
    mlm_labels: np.ndarray  # [B, S] int64, IGNORE where not masked
    nsp_labels: np.ndarray  # [B] int64, 1 = B follows A

    def as_list(self) -> list[np.ndarray]:
        return [self.input_ids, self.token_type_ids, self.mlm_labels, self.nsp_labels]

    def with_masked_positions(self, max_predictions: int) -> list[np.ndarray]:
        """Inputs for BertForPretraining with masked_positions: the first `max_predictions` masked
        positions of each row and their labels, padded with position 0 and label IGNORE. As in
        BERT's data pipeline, masks beyond max_predictions_per_seq are not predicted."""
        positions, labels = masked_positions(self.mlm_labels, max_predictions)
        return [self.input_ids, self.token_type_ids, labels, self.nsp_labels, positions]


def masked_positions(mlm_labels: np.ndarray, max_predictions: int) -> tuple[np.ndarray, np.ndarray]:
    """([B, P] positions, [B, P] labels) of the masked tokens in [B, S] labels (IGNORE = not masked)."""
    b = mlm_labels.shape[0]
    positions = np.zeros((b, max_predictions), "int64")
    labels = np.full((b, max_predictions), IGNORE, "int64")
    for row in range(b):
        where = np.flatnonzero(mlm_labels[row] != IGNORE)[:max_predictions]
        positions[row, : len(where)] = where
        labels[row, : len(where)] = mlm_labels[row, where]
    return positions, labels


class PretrainingData:
    """Deterministic NSP pairs + MLM masks from tokenized sentences."""

    def __init__(self, tokenizer, sentences: list[str], seq_len: int, max_positions: int, seed: int = 0):
        if not sentences:
            raise DataError("The dataset is empty: no sentences to build pretraining pairs from.")
        if seq_len > max_positions:
            raise DataError(
                f"seq_len={seq_len} is longer than the model's max_position_embeddings="
                f"{max_positions}; use seq_len <= {max_positions} or a config with more positions."
            )
        self.vocab = tokenizer.get_vocab()
        self.ids = [e.ids for e in tokenizer.encode_batch(sentences, add_special_tokens=False)]
        self.ids = [i for i in self.ids if i]
        self.seq_len, self.rng = seq_len, np.random.default_rng(seed)
        self.vocab_size = tokenizer.get_vocab_size()

    def batch(self, batch_size: int) -> PretrainingBatch:
        rows = [self._pair() for _ in range(batch_size)]
        ids, types, nsp = (np.stack([r[i] for r in rows]) for i in range(3))
        ids_masked, labels = self._mask(ids)
        return PretrainingBatch(ids_masked, types, labels, nsp.astype("int64"))

    def _pair(self):
        n = len(self.ids)
        a = int(self.rng.integers(n))
        is_next = self.rng.random() < 0.5 and a + 1 < n
        b = a + 1 if is_next else int(self.rng.integers(n))
        budget = self.seq_len - 3
        ta, tb = self.ids[a][: budget // 2], self.ids[b][: budget - budget // 2]
        tokens = [self.vocab["[CLS]"], *ta, self.vocab["[SEP]"], *tb, self.vocab["[SEP]"]]
        types = [0] * (len(ta) + 2) + [1] * (len(tb) + 1)
        pad = self.seq_len - len(tokens)
        return (np.array(tokens + [0] * pad, "int64"), np.array(types + [0] * pad, "int64"), np.int64(is_next))

    def _mask(self, ids: np.ndarray):
        special = np.isin(ids, [self.vocab[s] for s in SPECIALS])
        chosen = (self.rng.random(ids.shape) < 0.15) & ~special
        labels = np.where(chosen, ids, IGNORE).astype("int64")
        roll = self.rng.random(ids.shape)
        out = ids.copy()
        out[chosen & (roll < 0.8)] = self.vocab["[MASK]"]
        rand = chosen & (roll >= 0.8) & (roll < 0.9)
        out[rand] = self.rng.integers(len(SPECIALS), self.vocab_size, int(rand.sum()))
        return out, labels


def synthetic_batch(cfg, batch: int, seq: int, seed: int = 0) -> PretrainingBatch:
    """Random ids for throughput runs (no tokenizer)."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, cfg.vocab_size, (batch, seq)).astype("int64")
    types = np.zeros_like(ids)
    types[:, seq // 2 :] = 1
    labels = np.where(rng.random((batch, seq)) < 0.15, ids, IGNORE).astype("int64")
    return PretrainingBatch(ids, types, labels, rng.integers(0, 2, (batch,)).astype("int64"))
