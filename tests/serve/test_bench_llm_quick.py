"""benchmarks/serve_llm.py --quick: the LLM serving benchmark runs end to end (export, one server under
closed-loop streaming clients, the offline call, the full-batch step just before and after each level
(once the server is idle), the Paddle service) and reports each level's window as measured after the ramp."""

import json
import os
import subprocess
import sys

from xla_flags import child_env

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_serve_llm_benchmark_quick(tmp_path):
    out = tmp_path / "serve_llm.json"
    env = child_env()
    done = subprocess.run(
        [
            sys.executable,
            "benchmarks/serve_llm.py",
            "--quick",
            "--concurrency",
            "1",
            "8",
            "--paddle-requests",
            "2",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert [lv["clients"] for lv in report["levels"]] == [1, 8]
    for level in report["levels"]:
        # NOTE: the window opened because every client had finished its first request, not at the cap
        assert level["ramped"] and level["warm_s"] >= 0.5, level
        assert level["output_tokens"] > 0 and level["itl_p99_ms"] >= level["itl_p50_ms"] > 0, level
        # NOTE: the yardstick after a level waits for the server to drop the streams its clients closed
        assert 0 <= level["idle_after_s"] < 300, level
        before, after = level["full_batch_step_ms_before_after"]
        assert before > 0 and after > 0 and min(before, after) <= level["full_batch_step_ms"] <= max(before, after)
        assert level["itl_p99_over_step"] == level["itl_p99_ms"] / level["full_batch_step_ms"]
    steps = sorted(lv["full_batch_step_ms"] for lv in report["levels"])
    assert steps[0] <= report["full_batch_step_ms"] <= steps[-1]
    assert report["goals"]["itl_p99_over_step"] == report["levels"][-1]["itl_p99_over_step"]
    assert report["paddle_service"]["output_tokens_per_s"] > 0 and report["offline"]["output_tokens_per_s"] > 0
    assert set(report["goals"]) == {
        "clients",
        "vs_offline",
        "vs_paddle_service",
        "itl_p99_over_step",
        "one_client_vs_offline_batch_1",
        "one_client_vs_paddleformers_eager",
        "one_client_ttft_over_offline_prefill",
        "one_client_not_batch_invariant_vs_offline_batch_1",
        "one_client_not_batch_invariant_vs_paddleformers_eager",
        "shared_prefix_ttft_ratio",
        "most_at_once",
        "json_schema_tokens_per_s_ratio",
    }
    one = report["one_client"]
    assert min(one["served"]["tokens"]) > 2 and one["served"]["decode_tokens_per_s"] > 0
    # NOTE: --quick starts no second server (--no-batch-invariance): the full run reports it
    assert one["served_not_batch_invariant"] is None
    assert report["goals"]["one_client_not_batch_invariant_vs_offline_batch_1"] is None
    # NOTE: these two are differences of two calls' times: a tiny model's are within the machine's noise
    assert all(isinstance(one[k]["decode_tokens_per_s"], float) for k in ("offline_batch_1", "paddleformers_eager"))
    assert len(report["shared_prefix"]["ttft_ms"]) == 8 and report["shared_prefix"]["ratio"] > 0
    # NOTE: 16 requests of at most 64 tokens (4 blocks each) in 1024 tokens of cache: all of them fit at once
    assert 1 < report["at_once"]["most_at_once"] <= 16
    # NOTE: both sides make the schema's tokens ({"s":"..."} around 12 characters, then the EOS) at 1 and 3 clients
    for level in report["structured"]["levels"]:
        assert level["with_schema"]["tokens"] == level["without_schema"]["tokens"] == 21, level
        assert level["ratio"] > 0 and level["with_schema"]["tokens_per_s"] > 0
    assert "| 8 |" in done.stdout
