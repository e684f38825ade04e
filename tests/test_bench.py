"""`paddle-xla bench`: every configuration is measured in one run, ratios and MFU follow from the
timings, the inference outputs agree with Paddle Inference's, and bad input is refused up front."""

import json

import pytest
from typer.testing import CliRunner

import paddle_xla as px
from paddle_xla.cli import bench
from paddle_xla.cli.main import app


def test_parse_strategy():
    assert bench.parse_strategy("replicas=2, precision=bf16,recompute=none,shard_optimizer_state=true") == {
        "replicas": 2,
        "precision": "bf16",
        "recompute": None,
        "shard_optimizer_state": True,
    }
    assert bench.parse_strategy(None) == {}
    with pytest.raises(px.StrategyError, match="KEY=VALUE"):
        bench.parse_strategy("replicas")


def test_bench_tiny_measures_paddle_and_xla(tmp_path):
    out = tmp_path / "report.json"
    res = CliRunner().invoke(
        app, ["bench", "bert-tiny", "--batch", "4", "--seq", "16", "--repeats", "1", "--out", str(out)]
    )
    assert res.exit_code == 0, res.output
    report = json.loads(out.read_text())
    train, infer = report["results"]["train"], report["results"]["infer"]
    assert set(train) == {"paddle_eager", "paddle_to_static", "paddle_xla"}
    assert set(infer) == {"paddle_inference_onednn", "paddle_xla"}
    for configs in (train, infer):
        best = min(r["step_s"] for c, r in configs.items() if c != "paddle_xla")
        xla = configs["paddle_xla"]
        assert xla["speedup_vs_paddle_best"] == pytest.approx(best / xla["step_s"])
        assert xla["samples_per_s"] == pytest.approx(4 / xla["step_s"])
        assert xla["mfu_fp32"] == pytest.approx(xla["gflops"] / report["matmul_peak"]["fp32_gflops"])
    assert infer["paddle_xla"]["max_rel_diff_vs_paddle"] < 1e-5
    assert "paddle_xla" in res.output and "vs Paddle's best" in res.output


def test_bench_with_a_strategy_on_virtual_devices(tmp_path):
    out = tmp_path / "r.json"
    res = CliRunner().invoke(
        app,
        [
            "bench",
            "bert-tiny",
            "--batch",
            "4",
            "--seq",
            "16",
            "--repeats",
            "1",
            "--only",
            "train",
            "--no-paddle",
            "--strategy",
            "replicas=2,steps_per_call=2",
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    xla = json.loads(out.read_text())["results"]["train"]["paddle_xla"]
    assert xla["steps_per_call"] == 2 and xla["step_s"] == pytest.approx(xla["median_s"] / 2)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--strategy", "replicas=3,stages=0"], "positive int"),
        (["--strategy", "precision=fp8"], "precision"),
        (["--strategy", "colour=red"], "colour"),
        (["--only", "serve"], "train or infer"),
    ],
)
def test_bench_refuses_bad_input_before_timing(args, message):
    res = CliRunner().invoke(app, ["bench", "bert-tiny", *args])
    assert res.exit_code != 0
    assert message in res.output
