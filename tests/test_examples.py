"""Each scenario example runs end to end on its tiny config: it learns, and its losses match native
Paddle's on the same weights and batches where the example compares them."""

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
from xla_flags import child_env

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


def run(name: str) -> dict:
    spec = importlib.util.spec_from_file_location(f"example_{name}", os.path.join(EXAMPLES, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main(tiny=True)


def run_optimized(name: str) -> dict:
    """run(name) in a process of its own compiled at XLA's default optimization, for an example that
    trains long enough to repay it; its result comes back as the last line of its output, in JSON."""
    code = (
        f"import json, sys; sys.path.insert(0, {os.path.dirname(__file__)!r}); import test_examples; "
        f"print(json.dumps(test_examples.run({name!r}), default=float))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], env=child_env(fast_compile=False), capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def learned(losses, k=5) -> bool:
    return float(np.mean(losses[-k:])) < 0.8 * float(np.mean(losses[:k]))


def matches_native(r, steps=2) -> None:
    assert len(r["native_losses"]) >= steps
    np.testing.assert_allclose(r["losses"][: len(r["native_losses"])], r["native_losses"], rtol=1e-4)


def test_causal_lm():
    r = run("causal_lm")
    matches_native(r)
    assert learned(r["losses"])
    assert r["perplexity"] < r["vocab"] / 3
    assert r["generated"]


def test_image_classification():
    r = run_optimized("image_classification")
    matches_native(r, steps=1)  # NOTE: the forward pass only: the example says why
    assert learned(r["losses"])
    assert r["accuracy"] > 0.3  # chance is 0.1
    assert abs(r["accuracy"] - r["native_accuracy"]) <= 1 / 360 + 1e-9  # one image at most


def test_ctr():
    r = run("ctr")
    matches_native(r)
    assert learned(r["losses"])
    assert 0.7 < r["auc"] <= r["oracle_auc"] + 0.02


def test_speech_ctc():
    r = run("speech_ctc")
    matches_native(r)
    assert learned(r["losses"])
    assert r["symbol_error_rate"] < 0.3
