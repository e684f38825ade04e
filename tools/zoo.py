"""Optional: real models from Paddle's suites, installed with `pip install --no-deps` into .zoo/ (never
into the project's venv: several suites pin numpy < 2, which breaks JAX), each captured, checked,
compiled and compared with Paddle eager on random weights.

    make zoo          # = .venv/bin/python tools/zoo.py
    tools/zoo.py --install   # only install (make test does, for tests that compare with PaddleFormers)

Covers today: PaddleFormers 1.2 decoder LLMs (Llama, ERNIE 4.5, Phi-3, Gemma 3) in tiny configurations,
fuse_rms_norm=False (Paddle's fused RMSNorm does not capture on a CPU-only Paddle) and use_cache=False.
Qwen2/Qwen3 are left out: PaddleFormers imports paddlefleet for them, a GPU-only package."""
from __future__ import annotations

import importlib
import os
import subprocess
import sys
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ZOO = os.path.join(ROOT, ".zoo")
# NOTE: PaddleFormers 1.2's pure-Python dependencies, pinned where its own pins and transformers' meet.
PACKAGES = ["paddleformers==1.2.0", "transformers>=5.0,<5.4", "huggingface_hub>=1.3,<2", "tokenizers>=0.22,<=0.23.0",
            "colorlog", "regex", "requests", "urllib3", "aistudio_sdk", "psutil", "six", "omegaconf",
            "antlr4-python3-runtime==4.9.3", "pyyaml", "charset_normalizer", "idna", "certifi"]
MODELS = {  # name -> (module, config class, model class)
    "llama": ("paddleformers.transformers.llama", "LlamaConfig", "LlamaForCausalLM"),
    "ernie4_5": ("paddleformers.transformers.ernie4_5", "Ernie4_5Config", "Ernie4_5ForCausalLM"),
    "phi3": ("paddleformers.transformers.phi3", "Phi3Config", "Phi3ForCausalLM"),
    "gemma3_text": ("paddleformers.transformers.gemma3_text", "Gemma3TextConfig", "Gemma3ForCausalLM"),
}
TINY = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=4, max_position_embeddings=64, head_dim=16, fuse_rms_norm=False, use_cache=False)


def install() -> None:
    if not os.path.isdir(os.path.join(ZOO, "paddleformers")):
        subprocess.check_call([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", ZOO, *PACKAGES])
    sys.path.insert(0, ZOO)


def run_one(name: str) -> str:
    import numpy as np
    import paddle
    from paddle.static import InputSpec
    import paddle_xla as px
    module, cfg_cls, model_cls = MODELS[name]
    mod = importlib.import_module(module)
    config = getattr(mod, cfg_cls)(**TINY)
    paddle.seed(0)
    net = getattr(mod, model_cls)(config)
    net.eval()
    spec = [InputSpec([1, 8], "int64", "input_ids")]
    if not px.check(net, spec).ok:
        return "check reports problems:\n" + px.check(net, spec).describe_missing()
    ids = np.random.default_rng(0).integers(0, 128, (1, 8)).astype("int64")
    got = px.compile(net, spec)(ids)
    got = got[0] if isinstance(got, list) else got
    want = net(paddle.to_tensor(ids))
    want = getattr(want, "logits", want[0] if isinstance(want, (list, tuple)) else want)
    return f"max |difference| from Paddle {float(np.abs(np.asarray(got) - want.numpy()).max()):.2e}"


def main() -> int:
    install()
    if "--install" in sys.argv[1:]:
        return 0                        # NOTE: `make test` installs the suites for the tests that need them
    failed = 0
    for name in MODELS:
        try:
            print(f"{name:12s} {run_one(name)}", flush=True)
        except Exception as e:  # NOTE: report every model, then the count
            failed += 1
            print(f"{name:12s} FAILED {type(e).__name__}: {str(e).splitlines()[0][:200]}", flush=True)
            traceback.print_exc(limit=2)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
