"""Optional: real models from Paddle's suites, installed into this environment by `paddle-xla install SUITE`
(a pinned list with `pip install --no-deps`: the suites' own pins want numpy < 2, which breaks JAX; the list
lives in paddle_xla/cli/install.py), each captured, checked, compiled and compared with Paddle eager on
random weights.

    make zoo          # = .venv/bin/python tools/zoo.py
    tools/zoo.py --install   # only install (= paddle-xla install paddleformers, which `make test` runs)

Covers today: PaddleFormers 1.2 decoder LLMs (Llama, ERNIE 4.5, Phi-3, Gemma 3) in tiny configurations,
fuse_rms_norm=False (Paddle's fused RMSNorm does not capture on a CPU-only Paddle) and use_cache=False.
Qwen2/Qwen3 are left out: PaddleFormers imports paddlefleet for them, a GPU-only package."""

from __future__ import annotations

import importlib
import sys
import traceback

from paddle_xla.cli.install import PADDLEFORMERS as PACKAGES  # noqa: F401  (the one pinned list)
from paddle_xla.cli.install import install as install_suite

MODELS = {  # name -> (module, config class, model class)
    "llama": ("paddleformers.transformers.llama", "LlamaConfig", "LlamaForCausalLM"),
    "ernie4_5": ("paddleformers.transformers.ernie4_5", "Ernie4_5Config", "Ernie4_5ForCausalLM"),
    "phi3": ("paddleformers.transformers.phi3", "Phi3Config", "Phi3ForCausalLM"),
    "gemma3_text": ("paddleformers.transformers.gemma3_text", "Gemma3TextConfig", "Gemma3ForCausalLM"),
}
TINY = dict(
    vocab_size=128,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=4,
    max_position_embeddings=64,
    head_dim=16,
    fuse_rms_norm=False,
    use_cache=False,
)


def install() -> int:
    return install_suite("paddleformers")


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
    status = install()
    if status or "--install" in sys.argv[1:]:
        return status
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
