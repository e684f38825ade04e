"""benchmarks/serve.py --quick: the serving benchmark runs end to end (export, offline calls, the
server with and without batching, the Paddle Inference service), every answer is checked against
the answer for its own input, and the report carries the issue's goals."""

import json
import os
import subprocess
import sys

from xla_flags import child_env

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_serve_benchmark_quick(tmp_path):
    out = tmp_path / "serve.json"
    env = child_env()
    done = subprocess.run(
        [sys.executable, "benchmarks/serve.py", "--quick", "--models", "bert", "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(out.read_text())
    bert = report["models"]["bert"]
    assert set(bert["served"]) == {"paddle_xla_batching", "paddle_xla_no_batching", "paddle_inference"}
    for name, served in bert["served"].items():
        if name.startswith("paddle_xla"):
            assert served["exit_status"] == 0, name  # NOTE: a drained `paddle-xla serve` exits 0 on SIGTERM
        for level in served["levels"].values():
            assert level["wrong_answers"] == 0 and level["failed"] == 0 and level["answered_in_window"] > 0
    assert set(bert["offline"]) == {"1", "4"} and bert["offline"]["4"]["rows_per_s"] > 0
    assert len(bert["goals"]) == 4 and all(isinstance(g["pass"], bool) for g in bert["goals"])
    assert "| bert | 4 |" in done.stdout and ("PASS" in done.stdout or "MISS" in done.stdout)
