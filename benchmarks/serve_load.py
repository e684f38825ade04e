"""Closed-loop load with tritonclient.http: C clients, each sending one-row requests back to back.

Every client has its own connection and its own thread, as C separate users would. The level runs
until its deadline or its request budget, whichever comes first. It is measured from the moment the
last client got its first answer (connections open, every client in the loop), so set-up is not
counted. Throughput counts the answers inside that window; latency takes every request sent
inside it. Each answer is kept with the index of the input it was for, and checked afterwards
against what that input should give."""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass, field

import numpy as np
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

DATATYPES = {np.dtype("float32"): "FP32", np.dtype("int64"): "INT64", np.dtype("int32"): "INT32"}


@dataclass
class Level:
    url: str
    model: str
    input_names: list[str]
    output_names: list[str]
    pool: list[np.ndarray]
    clients: int
    seconds: float
    max_requests: int


@dataclass
class Record:
    sent: float
    answered: float
    index: int
    outputs: list[np.ndarray] | None  # None: the request failed
    error: str = ""


@dataclass
class Budget:
    left: int
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self) -> bool:
        with self.lock:
            self.left -= 1
            return self.left >= 0


def run_level(level: Level) -> tuple[list[Record], float, float]:
    """(records, start of the measured window, its end)."""
    budget, records, first = Budget(level.max_requests), [], []
    deadline = time.monotonic() + level.seconds
    threads = [
        threading.Thread(target=_client, args=(level, k, budget, deadline, records, first), daemon=True)
        for k in range(level.clients)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(level.seconds + 600)
    window_start = max(first) if len(first) == level.clients else deadline
    return records, window_start, deadline


def _client(level: Level, k: int, budget: Budget, deadline: float, records: list, first: list) -> None:
    client = httpclient.InferenceServerClient(level.url, network_timeout=600, connection_timeout=60)
    rows = len(level.pool[0])
    index, seen_first = k % rows, False
    try:
        while time.monotonic() < deadline and budget.take():
            record = _one(client, level, index)
            records.append(record)
            if not seen_first and record.outputs is not None:
                first.append(record.answered)
                seen_first = True
            index = (index + level.clients) % rows
    finally:
        client.close()


def _one(client, level: Level, index: int) -> Record:
    inputs = []
    for name, pool in zip(level.input_names, level.pool):
        row = pool[index : index + 1]
        item = httpclient.InferInput(name, list(row.shape), DATATYPES[row.dtype])
        item.set_data_from_numpy(row, binary_data=True)
        inputs.append(item)
    wanted = [httpclient.InferRequestedOutput(n, binary_data=True) for n in level.output_names]
    sent = time.monotonic()
    try:
        result = client.infer(level.model, inputs, outputs=wanted)
        outputs = [result.as_numpy(n) for n in level.output_names]
        return Record(sent, time.monotonic(), index, outputs)
    except InferenceServerException as e:
        return Record(sent, time.monotonic(), index, None, str(e)[:200])


def summarise(
    records: list[Record], window_start: float, window_end: float, answers: list[np.ndarray], rtol: float, atol: float
) -> dict:
    """Throughput and latency over the window, failures, and answers that differ from `answers`."""
    inside = [r for r in records if window_start <= r.answered <= window_end and r.outputs is not None]
    timed = [r for r in records if r.sent >= window_start and r.outputs is not None]
    latencies = sorted((r.answered - r.sent) * 1e3 for r in timed)
    # NOTE: atol scales with each output's largest value (ResNet-50's logits reach ~800 here, where
    # batch 4 and batch 1 differ by 1e-3 in fp32: XLA blocks the convolutions differently per shape)
    scales = [max(1.0, float(np.abs(a).max())) for a in answers]
    wrong = sum(not _matches(r, answers, rtol, atol, scales) for r in records if r.outputs is not None)
    failed = [r.error for r in records if r.outputs is None]
    window = window_end - window_start
    return {
        "requests": len(records),
        "answered_in_window": len(inside),
        "window_s": window,
        "throughput_per_s": len(inside) / window if window > 0 else 0.0,
        "p50_ms": _percentile(latencies, 50),
        "p99_ms": _percentile(latencies, 99),
        "mean_ms": statistics.fmean(latencies) if latencies else None,
        "latency_samples": len(latencies),
        "failed": len(failed),
        "failures": sorted(set(failed))[:5],
        "wrong_answers": wrong,
    }


def _matches(record: Record, answers: list[np.ndarray], rtol: float, atol: float, scales: list[float]) -> bool:
    return all(
        got.shape == want[record.index : record.index + 1].shape
        and np.allclose(got, want[record.index : record.index + 1], rtol=rtol, atol=atol * scale)
        for got, want, scale in zip(record.outputs, answers, scales)
    )


def _percentile(sorted_values: list[float], q: float) -> float | None:
    if not sorted_values:
        return None
    return float(np.percentile(sorted_values, q))
