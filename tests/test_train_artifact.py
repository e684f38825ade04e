"""Exported train steps (.pxa of kind "train"): they continue the in-process loss curve exactly, in
this process and where Paddle cannot be imported; checkpoints are TrainStep's; bad inputs and files
give clear errors; synthetic weights; and benchmarks/gpu.py --quick runs on CPU."""

import json
import os
import subprocess
import sys
import zipfile

import numpy as np
import paddle
import paddle.nn as nn
import pytest
from paddle.static import InputSpec

import paddle_xla as px
from paddle_xla.artifact import reader as pxa
from paddle_xla.artifact.writer import ExportError, export

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# NOTE: CrossEntropyLoss needs the pd_op.cross_entropy_with_softmax lowering; until it is there the
# same MLP trains on MSELoss (the artifact machinery does not care which loss).
CE = "pd_op.cross_entropy_with_softmax" in px.supported_ops()
X_SPEC = InputSpec([None, 16], "float32", "x")
Y_SPEC = InputSpec([None], "int64", "label") if CE else InputSpec([None, 4], "float32", "label")


class MLP(nn.Layer):
    def __init__(self):
        super().__init__()
        self.l1, self.l2 = nn.Linear(16, 32), nn.Linear(32, 4)

    def forward(self, x):
        return self.l2(nn.functional.gelu(self.l1(x)))


def make_step(scheduler=None, strategy=None, seed=7):
    paddle.seed(seed)
    # NOTE: the same parameter names (linear_0, ...) each time, so weights compare by name across steps.
    with paddle.utils.unique_name.guard():
        net = MLP()
    sched = scheduler or paddle.optimizer.lr.LinearWarmup(
        paddle.optimizer.lr.CosineAnnealingDecay(3e-3, 20), 5, 0.0, 3e-3
    )
    opt = paddle.optimizer.AdamW(
        sched, parameters=net.parameters(), weight_decay=0.01, grad_clip=nn.ClipGradByGlobalNorm(1.0)
    )
    loss = nn.CrossEntropyLoss() if CE else nn.MSELoss()
    kw = {} if strategy is None else {"strategy": strategy}
    return px.train_step(net, loss, opt, [X_SPEC], [Y_SPEC], **kw), net


def batches(n, seed=3, batch=8):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        x = rng.standard_normal((batch, 16)).astype("float32")
        y = rng.integers(0, 4, (batch,)).astype("int64") if CE else rng.standard_normal((batch, 4)).astype("float32")
        out.append((x, y))
    return out


BATCHES = batches(8)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A step trained 3 steps, exported, then run 5 more in process: the reference."""
    folder = tmp_path_factory.mktemp("train-pxa")
    step, net = make_step()
    for x, y in BATCHES[:3]:
        step(x, y)
    path = str(folder / "mlp-train.pxa")
    manifest = export(step, path)
    losses = [step(x, y) for x, y in BATCHES[3:]]
    net.eval()
    infer = px.compile(net, [X_SPEC])
    infer_path = str(folder / "mlp.pxa")
    export(infer, infer_path)
    return {
        "path": path,
        "manifest": manifest,
        "losses": losses,
        "weights": step.weights(),
        "infer": infer,
        "infer_path": infer_path,
        "folder": folder,
    }


def rewrite(src, dst, replace=None, manifest=None):
    with zipfile.ZipFile(src) as z:
        members = {n: z.read(n) for n in z.namelist()}
    members.update(replace or {})
    if manifest is not None:
        members[pxa.MANIFEST] = json.dumps(manifest).encode()
    with zipfile.ZipFile(dst, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return str(dst)


def manifest_of(path):
    with zipfile.ZipFile(path) as z:
        return json.loads(z.read(pxa.MANIFEST))


# ---- format and parity --------------------------------------------------------------------------
def test_file_format(run):
    with zipfile.ZipFile(run["path"]) as z:
        names = set(z.namelist())
        opt = json.loads(z.read("optimizer.json"))
        strategy = json.loads(z.read("strategy.json"))
    assert names == {
        "manifest.json",
        "graph.json",
        "weights.safetensors",
        "strategy.json",
        "optimizer.json",
        "train_state.safetensors",
        "exported/cpu.bin",
    }
    m = run["manifest"]
    assert m["kind"] == "train" and m["format_version"] == pxa.FORMAT_VERSION
    assert m["train"]["step"] == 3 and m["train"]["lr_offset"] == 0 and m["train"]["opt_state"] == "stored"
    assert m["train"]["precision"] == "fp32" and len(m["train"]["trainable"]) == 4
    assert [f["name"] for f in m["feeds"]] == ["x", "label"]
    assert opt["config"]["type"] == "OptimizerConfig" and opt["schedule"]["type"] == "LinearWarmup"
    assert opt["config"]["grad_clip"]["type"] == "ClipGradByGlobalNorm"
    assert strategy == px.Strategy().to_dict()
    from safetensors.numpy import load

    with zipfile.ZipFile(run["path"]) as z:
        state = load(z.read("train_state.safetensors"))
    assert "rng" in state and all(k == "rng" or k.startswith("opt['linear_") for k in state)


def test_loaded_step_continues_the_curve(run):
    s = pxa.load(run["path"])
    assert s.mode == "exported", s.why
    assert s.step == 3
    losses = [s(x, y) for x, y in BATCHES[3:]]
    np.testing.assert_allclose(losses, run["losses"], rtol=1e-6)
    for k, v in run["weights"].items():
        np.testing.assert_allclose(s.weights()[k], v, rtol=1e-6, atol=1e-7, err_msg=k)


def test_relowered_step_continues_the_curve(run):
    s = pxa.load(run["path"], prefer_graph=True)
    assert s.mode == "relowered"
    np.testing.assert_allclose([s(x, y) for x, y in BATCHES[3:]], run["losses"], rtol=1e-6)


def test_not_exported_for_this_platform_relowers(run, tmp_path):
    s = pxa.load(run["path"])
    path = str(tmp_path / "cuda.pxa")
    s.export(path, platforms=("cuda",))
    t = pxa.load(path)
    assert t.mode == "relowered" and "'cpu'" in t.why and t.exported_platforms == ["cuda"]
    np.testing.assert_allclose([t(x, y) for x, y in BATCHES[3:]], run["losses"], rtol=1e-6)


def test_export_again_continues(run, tmp_path):
    s = pxa.load(run["path"])
    s(*BATCHES[3])
    path = str(tmp_path / "again.pxa")
    manifest = s.export(path)
    assert manifest["train"]["step"] == 4
    t = pxa.load(path)
    np.testing.assert_allclose([t(x, y) for x, y in BATCHES[4:]], run["losses"][1:], rtol=1e-6)


# ---- Paddle-free --------------------------------------------------------------------------------
PADDLE_FREE = """
import sys
sys.modules["paddle"] = None        # any `import paddle` now raises ImportError
import numpy as np
import paddle_xla.artifact as pxa
data = np.load(sys.argv[3])
model, step = pxa.load(sys.argv[1]), pxa.load(sys.argv[2])
out = model(data["x"])
losses = [step(data[f"x{i}"], data[f"y{i}"]) for i in range(5)]
step.save_checkpoint(sys.argv[5])
np.savez(sys.argv[4], out=out, losses=np.asarray(losses), modes=np.asarray([model.mode, step.mode]))
assert sys.modules["paddle"] is None
"""


def test_runs_where_paddle_is_not_importable(run, tmp_path):
    x = np.random.default_rng(5).standard_normal((4, 16)).astype("float32")
    feeds = {
        "x": x,
        **{f"x{i}": b[0] for i, b in enumerate(BATCHES[3:])},
        **{f"y{i}": b[1] for i, b in enumerate(BATCHES[3:])},
    }
    np.savez(tmp_path / "in.npz", **feeds)
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    ckpt = str(tmp_path / "after.ckpt")
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            PADDLE_FREE,
            run["infer_path"],
            run["path"],
            str(tmp_path / "in.npz"),
            str(tmp_path / "out.npz"),
            ckpt,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = np.load(tmp_path / "out.npz")
    assert list(out["modes"]) == ["exported", "exported"]
    np.testing.assert_allclose(out["out"], run["infer"](x), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(out["losses"], run["losses"], rtol=1e-6)
    # the checkpoint it wrote resumes a TrainStep in this (Paddle) process at step 8
    step, _ = make_step()
    step.load_checkpoint(ckpt)
    assert step.state.step == 8
    for k, v in run["weights"].items():
        np.testing.assert_allclose(step.weights()[k], v, rtol=1e-6, atol=1e-7, err_msg=k)


# ---- checkpoints ----------------------------------------------------------------------------------
def test_checkpoints_are_train_steps(run, tmp_path):
    s = pxa.load(run["path"])
    s(*BATCHES[3])
    s.save_checkpoint(str(tmp_path / "a.ckpt"))
    step, _ = make_step()
    step.load_checkpoint(str(tmp_path / "a.ckpt"))
    assert step.lr() == s.lr()
    theirs = [step(x, y) for x, y in BATCHES[4:6]]
    assert [s(x, y) for x, y in BATCHES[4:6]] == pytest.approx(theirs, rel=1e-6)
    # and back: a TrainStep's checkpoint (step 6) into the artifact
    step.save_checkpoint(str(tmp_path / "b.ckpt"))
    t = pxa.load(run["path"])
    t.load_checkpoint(str(tmp_path / "b.ckpt"))
    assert t.step == 6
    np.testing.assert_allclose([t(x, y) for x, y in BATCHES[6:]], run["losses"][3:], rtol=1e-6)


def test_checkpoint_of_another_model_is_refused(run, tmp_path):
    paddle.seed(0)
    net = nn.Linear(16, 4)
    other = px.train_step(
        net,
        nn.MSELoss(),
        paddle.optimizer.SGD(0.1, parameters=net.parameters()),
        [X_SPEC],
        [InputSpec([None, 4], "float32", "y")],
    )
    other.save_checkpoint(str(tmp_path / "other.ckpt"))
    with pytest.raises(px.CheckpointError, match="does not fit"):
        pxa.load(run["path"]).load_checkpoint(str(tmp_path / "other.ckpt"))


# ---- bad inputs and files -------------------------------------------------------------------------
def test_wrong_label_shape(run):
    s = pxa.load(run["path"])
    x, y = BATCHES[3]
    bad = y[:, None] if CE else y[:, :3]
    with pytest.raises(px.FeedError, match="'label'"):
        s(x, bad)
    with pytest.raises(px.FeedError, match="Missing input"):
        s(x)
    assert s.step == 3


def test_non_finite_step_keeps_the_weights(run):
    s = pxa.load(run["path"])
    before = s.weights()
    x, y = BATCHES[3]
    with pytest.raises(px.TrainingError, match="not finite at step 3"):
        s(np.full_like(x, np.nan), y)
    assert s.step == 3
    for k, v in before.items():
        np.testing.assert_array_equal(s.weights()[k], v)
    np.testing.assert_allclose(s(x, y), run["losses"][0], rtol=1e-6)


def test_truncated_train_artifact(run, tmp_path):
    data = open(run["path"], "rb").read()
    path = tmp_path / "cut.pxa"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(px.ModelLoadError, match="truncated"):
        pxa.load(str(path))


def test_tampered_optimizer_state(run, tmp_path):
    with zipfile.ZipFile(run["path"]) as z:
        data = z.read("train_state.safetensors")
    path = rewrite(run["path"], tmp_path / "bad.pxa", replace={"train_state.safetensors": data[:-5]})
    with pytest.raises(px.ModelLoadError, match="Member 'train_state.safetensors' .*sha256"):
        pxa.load(path)


def test_newer_format_version(run, tmp_path):
    m = manifest_of(run["path"])
    m.update(format_version=pxa.FORMAT_VERSION + 1, paddle_xla_version="9.0.0")
    newer, ours = pxa.FORMAT_VERSION + 1, pxa.FORMAT_VERSION
    with pytest.raises(px.ModelLoadError, match=rf"format version {newer} .*reads format version {ours} .*[Uu]pgrade"):
        pxa.load(rewrite(run["path"], tmp_path / "new.pxa", manifest=m))


def test_train_entry_missing(run, tmp_path):
    m = manifest_of(run["path"])
    del m["train"]
    with pytest.raises(px.ModelLoadError, match="lacks its train entry"):
        pxa.load(rewrite(run["path"], tmp_path / "less.pxa", manifest=m))


def test_lambda_decay_cannot_travel(tmp_path):
    step, _ = make_step(paddle.optimizer.lr.LambdaDecay(0.01, lambda e: 0.9**e))
    with pytest.raises(ExportError, match="LambdaDecay .*cannot travel"):
        export(step, str(tmp_path / "lambda.pxa"))
    assert not os.path.exists(tmp_path / "lambda.pxa")


# ---- synthetic weights ------------------------------------------------------------------------------
def test_synthetic_weights(run, tmp_path):
    s = pxa.load(run["path"])
    path = str(tmp_path / "synth.pxa")
    from paddle_xla.artifact.train_writer import export_train

    manifest = export_train(s, path, synthetic={"std": 0.5, "seed": 1})
    assert manifest["train"]["opt_state"] == "fresh"
    assert sorted(manifest["synthetic_weights"]["weights"]) == ["linear_0.w_0", "linear_1.w_0"]
    t = pxa.load(path)
    w = t.weights()
    np.testing.assert_array_equal(w["linear_0.b_0"], s.weights()["linear_0.b_0"])  # 1-D: stored
    assert w["linear_0.w_0"].shape == (16, 32) and 0.4 < w["linear_0.w_0"].std() < 0.6
    np.testing.assert_array_equal(pxa.load(path).weights()["linear_0.w_0"], w["linear_0.w_0"])  # same seed
    assert all(not np.any(np.asarray(v["moment1"])) for v in t.state.opt_state.values())
    assert np.isfinite(t(*BATCHES[3]))


def test_synthetic_inference_weights(run, tmp_path):
    path = str(tmp_path / "synth-infer.pxa")
    export(run["infer"], path, synthetic_weights={"seed": 2})
    full = os.path.getsize(run["infer_path"])
    assert os.path.getsize(path) < full
    a, b = pxa.load(path), pxa.load(path)
    x = BATCHES[0][0]
    np.testing.assert_array_equal(a(x), b(x))
    assert a.mode == "exported" and 0.015 < np.std(a.weights["linear_0.w_0"]) < 0.025


# ---- strategies ---------------------------------------------------------------------------------------
def test_precision_override_relowers(run):
    s = pxa.load(run["path"], strategy=px.Strategy(precision="bf16"))
    assert s.mode == "relowered" and "bf16" in s.why
    np.testing.assert_allclose([s(x, y) for x, y in BATCHES[3:]], run["losses"], rtol=1e-2)  # bf16 vs fp32


def test_bf16_step_exports_and_continues(tmp_path):
    step, _ = make_step(strategy=px.Strategy(precision="bf16"))
    step(*BATCHES[0])
    path = str(tmp_path / "bf16.pxa")
    assert export(step, path)["train"]["precision"] == "bf16"
    want = [step(x, y) for x, y in BATCHES[1:4]]
    s = pxa.load(path)
    assert s.mode == "exported", s.why
    # NOTE: the exported step is the single-device one and in process bf16 runs on the SPMD engine;
    # both apply the same cast policy, and the losses agree to the bit.
    np.testing.assert_allclose([s(x, y) for x, y in BATCHES[1:4]], want, rtol=1e-6)
    r = pxa.load(path, prefer_graph=True)
    np.testing.assert_allclose([r(x, y) for x, y in BATCHES[1:4]], want, rtol=1e-6)


def test_replicated_step_relowers_with_its_strategy(tmp_path):
    strategy = px.Strategy(replicas=2)
    step, _ = make_step(strategy=strategy)
    step(*BATCHES[0])
    path = str(tmp_path / "r2.pxa")
    manifest = export(step, path, platforms=("cpu", "cuda"))
    assert manifest["exported"] == {} and "replicas=2" in manifest["train"]["not_exported"]
    want = [step(x, y) for x, y in BATCHES[1:4]]
    s = pxa.load(path)
    assert s.mode == "relowered" and s.strategy == strategy
    np.testing.assert_allclose([s(x, y) for x, y in BATCHES[1:4]], want, rtol=1e-6)


# ---- benchmarks/gpu.py --------------------------------------------------------------------------------
def test_gpu_script_quick_on_cpu(tmp_path):
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1")
    env.pop("OUT", None)
    make = subprocess.run(
        [sys.executable, "benchmarks/make_gpu_artifacts.py", "--quick", "--out", str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert make.returncode == 0, make.stdout[-2000:] + make.stderr[-3000:]
    out = tmp_path / "gpu.json"
    proc = subprocess.run(
        [sys.executable, "benchmarks/gpu.py", "--quick", "--artifacts", str(tmp_path), "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["errors"] == {}
    assert set(res["sections"]) == {"peak", "train-bf16", "infer-bf16", "infer-fp32", "train-fp32", "llm-rounds"}
    llm = res["sections"]["llm-rounds"]
    assert llm["mode"].startswith("relowered") and llm["decode_step_ms"] > 0 and llm["round_with_chunk_ms"] > 0
    assert len(llm["rounds_ms_all"]) == 3 * 5  # NOTE: 3 prompts of 4.5 chunks each
    for name in ("train-bf16", "train-fp32", "infer-fp32"):
        r = res["sections"][name]
        assert (
            r["samples_per_s"] > 0
            and r["mode"] == "exported"
            and r["flops_per_" + ("step" if name.startswith("train") else "batch")] > 0
        )
    assert res["sections"]["peak"]["bf16"]["tflops"] > 0


INT64_FREE = """
import sys
sys.modules["paddle"] = None
import numpy as np
import paddle_xla.artifact as pxa
ids = np.load(sys.argv[2])
m = pxa.load(sys.argv[1])
np.save(sys.argv[3], m(ids))
assert m.mode == "exported", m.why
"""


class Embed(nn.Layer):
    def __init__(self):
        super().__init__()
        self.emb, self.fc = nn.Embedding(50, 8), nn.Linear(8, 2)

    def forward(self, ids):
        return self.fc(self.emb(ids)).mean(axis=1)


def test_int64_inputs_in_a_fresh_paddle_free_process(tmp_path):
    # A fresh process that only imports paddle_xla.artifact must keep int64 token ids int64.
    paddle.seed(0)
    model = px.compile(Embed(), [InputSpec([None, 6], "int64", "ids")])
    path = str(tmp_path / "embed.pxa")
    export(model, path)
    ids = np.random.default_rng(0).integers(0, 50, (3, 6)).astype("int64")
    np.save(tmp_path / "ids.npy", ids)
    proc = subprocess.run(
        [sys.executable, "-c", INT64_FREE, path, str(tmp_path / "ids.npy"), str(tmp_path / "o.npy")],
        cwd=ROOT,
        env=dict(os.environ, JAX_PLATFORMS="cpu"),
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    np.testing.assert_allclose(np.load(tmp_path / "o.npy"), model(ids), rtol=1e-6, atol=1e-6)
