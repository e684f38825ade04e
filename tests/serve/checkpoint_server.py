"""A tiny PaddleFormers Llama saved as a checkpoint folder: save_pretrained, a tokenizer.json that puts a BOS
before a text prompt, a chat template that writes the BOS itself, and a generation_config.json with an
eos_token_id list and temperature 0. `paddle-xla serve FOLDER` serves it: the session fixtures `checkpoint`
and `checkpoint_server` (tests/serve/conftest.py)."""

import json

import paddle
from generation.test_generator import _model
from generation.test_generator_artifact import _tokenizer
from tokenizers.processors import TemplateProcessing

from .harness import ServeProcess

TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{{ m['role'] }} {{ m['content'] }} {% endfor %}"
    "{% if add_generation_prompt %}assistant{% endif %}{% if enable_thinking %} w4{% endif %}"
)
BOS = 3  # NOTE: the tokenizer's post-processor puts w3 before a text prompt, and the template writes it too
PROMPT = [5, 9, 14, 20]
ROWS = 4
# NOTE: the server speculates by prompt lookup: every completion of these tests is a speculative one
SPECULATIVE = '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 2, "prompt_lookup_min": 1}'


def paddle_greedy(net, ids, max_new_tokens, eos):
    out, _ = net.generate(
        paddle.to_tensor([ids]), decode_strategy="greedy_search", max_new_tokens=max_new_tokens, eos_token_id=eos
    )
    return [int(t) for t in out.numpy()[0]]


def _second_eos(net) -> int:
    """A token the greedy continuation of PROMPT makes after its first token and not before: generation_config's
    second eos id, so that only its list (not config.json's eos) can end the completion there."""
    made = paddle_greedy(net, PROMPT, 24, eos=2)
    fresh = [t for i, t in enumerate(made) if i >= 1 and t not in made[:i] and t != 2]
    assert fresh, f"the tiny model repeats one token: {made}"
    return fresh[0]


def make_checkpoint(tmp_path_factory):
    """(the folder, the Paddle model it holds, generation_config's eos list, the cache folder the server uses)."""
    root = tmp_path_factory.mktemp("checkpoints")
    folder = root / "tiny-llama"
    net = _model("llama")
    net.save_pretrained(str(folder))
    tokenizer = _tokenizer()
    tokenizer.post_processor = TemplateProcessing(single="w3 $A", special_tokens=[("w3", BOS)])
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": TEMPLATE, "bos_token": "w3"}))
    eos = [2, _second_eos(net)]
    # NOTE: temperature 0 here makes a request that leaves temperature out greedy (OpenAI's default is 1.0)
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": eos, "temperature": 0.0}))
    return str(folder), net, eos, str(root / "cache" / "jax")


def serve_checkpoint(checkpoint) -> ServeProcess:
    folder, _, _, cache = checkpoint
    return ServeProcess(
        folder, "--max-batch-size", str(ROWS), "--speculative-config", SPECULATIVE, env={"PADDLE_XLA_CACHE_DIR": cache}
    )
