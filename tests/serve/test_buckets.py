"""Sequence buckets (--seq-buckets 16,32 on the shared server) with a BERT-like encoder: lengths are
padded with zeros to a bucket, several lengths share a call, and each answer, sliced back to its own
length, equals the artifact's output on the unpadded input (its attention mask hides the padding)."""

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import tritonclient.http as httpclient

NAMES = ("input_ids", "token_type_ids", "attention_mask")
# NOTE: (batch, length): 5 and 11 share bucket 16, 23 and 32 bucket 32; 37 is past the largest bucket
# and runs at its own length
REQUESTS = [(1, 5), (2, 11), (3, 16), (2, 23), (1, 32), (2, 37), (3, 5), (1, 11)]


def bert_inputs(batch, length, seed):
    rng = np.random.default_rng(seed)
    ids, types = rng.integers(0, 100, (batch, length)), rng.integers(0, 2, (batch, length))
    mask = np.ones((batch, length), "int64")
    mask[:, length - 1 :] = 0  # NOTE: the request's own padding, inside its length, stays the model's business
    return [ids.astype("int64"), types.astype("int64"), mask]


def send(url, arrays, binary, start):
    client = httpclient.InferenceServerClient(url)
    inputs = [httpclient.InferInput(n, list(a.shape), "INT64") for n, a in zip(NAMES, arrays)]
    for inp, a in zip(inputs, arrays):
        inp.set_data_from_numpy(a, binary_data=binary)
    start.wait()
    result = client.infer("bert", inputs)
    client.close()
    return result.as_numpy("output_0"), result.as_numpy("output_1")


def test_bucketed_lengths_answer_as_unpadded(main_server, artifacts):
    arrays = [bert_inputs(b, n, seed=i) for i, (b, n) in enumerate(REQUESTS)]
    start = threading.Barrier(len(arrays))
    with ThreadPoolExecutor(len(arrays)) as pool:
        answers = list(
            pool.map(
                send,
                [main_server.url] * len(arrays),
                arrays,
                [i % 2 == 0 for i in range(len(arrays))],
                [start] * len(arrays),
            )
        )
    for (batch, length), a, (hidden, pooled) in zip(REQUESTS, arrays, answers):
        want_hidden, want_pooled = artifacts["bert"](*a)
        assert hidden.shape == (batch, length, 32) and pooled.shape == (batch, 32)
        np.testing.assert_allclose(hidden, want_hidden, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(pooled, want_pooled, rtol=1e-5, atol=1e-5)
