"""px.export(gen, ..., tokenizer=) and artifact.load: a generator that runs without Paddle, with the live
generator's tokens, through Python and through `paddle-xla generate`."""

import os
import subprocess
import sys

import numpy as np
import pytest
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace

import paddle_xla as px
import paddle_xla.artifact as pxa
from paddle_xla.api.generator import Generator
from paddle_xla.artifact import synthetic_weights
from paddle_xla.errors import ExportError, GenerationError

from .paddleformers import module
from .test_generator import BATCH, SLOTS, TINY, _model, _paddle, _prompts

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORDS = ["[PAD]", "[UNK]", "</s>"] + [f"w{i}" for i in range(3, TINY["vocab_size"])]


def _tokenizer():
    tok = Tokenizer(WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    return tok


_EXPORTS = {}


def _exported(precision, tmp_path_factory):
    """(model, generator, artifact path, manifest), one export per precision for the module."""
    if precision not in _EXPORTS:
        net = _model("llama")
        gen = Generator(net, max_batch_size=BATCH, max_length=SLOTS, chunk=4, strategy=px.Strategy(precision=precision))
        path = str(tmp_path_factory.mktemp("gen") / "llm.pxa")
        _EXPORTS[precision] = net, gen, path, px.export(gen, path, tokenizer=_tokenizer())
    return _EXPORTS[precision]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    return _exported("fp32", tmp_path_factory)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_loaded_generator_gives_the_live_generators_tokens(precision, tmp_path_factory):
    net, gen, path, manifest = _exported(precision, tmp_path_factory)
    art = pxa.load(path)
    assert art.mode == "exported" and art.geometry == gen.geometry
    assert manifest["kind"] == "generator" and manifest["generation"]["buckets"] == [16, 32, 40]
    ids, mask = _prompts([7, 3, 5], 7)
    want, want_scores = gen.generate(ids, attention_mask=mask, max_new_tokens=9)
    got, scores = art.generate(ids, attention_mask=mask, max_new_tokens=9)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(scores, want_scores)
    if gen.geometry.precision == "fp32":  # and so PaddleFormers' own generate's
        np.testing.assert_array_equal(
            got, _paddle(net, ids, mask, max_new_tokens=9, decode_strategy="greedy_search")[0]
        )
    else:  # the matmul weights travel in float32, held in bf16 when loaded
        assert manifest["exported"]["cpu"]["half_weights"] == sorted(gen.held.half) != []
    kw = dict(decode_strategy="sampling", top_k=5, top_p=0.9, temperature=0.8, max_new_tokens=6, seed=11)
    np.testing.assert_array_equal(
        art.generate(ids, attention_mask=mask, **kw)[0], gen.generate(ids, attention_mask=mask, **kw)[0]
    )


def test_relowered_generator_equals_the_exported_one(exported):
    _, gen, path, _ = exported
    art = pxa.load(path, prefer_graph=True)
    assert art.mode == "relowered" and "prefer_graph" in art.why
    ids, mask = _prompts([20, 4], 20, seed=2)  # the 32 bucket
    np.testing.assert_array_equal(
        art.generate(ids, attention_mask=mask, max_new_tokens=8)[0],
        gen.generate(ids, attention_mask=mask, max_new_tokens=8)[0],
    )


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_served_artifact_runs_a_prefill_beside_a_decode_step_where_products_stay_row_exact(
    precision, tmp_path_factory
):
    # NOTE: fp32 on CPU holds its matmul weights as [N, K], where a row's product does not depend on the rows
    # beside it: the server's programs are then lowered from the Graphs in lockstep; bf16 keeps them apart
    from paddle_xla.generation.continuous import Request

    _, gen, path, _ = _exported(precision, tmp_path_factory)
    engine = pxa.load(path).continuous()
    assert (engine._together is not None) == (precision == "fp32")
    engine.insert(0, Request((5, 6, 7), 20))
    prompt = Request((9, 4, 11, 2, 8), 6)
    engine.begin(1, prompt)
    done, out = engine.step_and_fill(1)
    got = [done[0]] + [int(t) for t in out[1] if t >= 0]  # NOTE: the decode chunk that follows has the row
    while engine.busy[1]:
        got += [int(t) for t in engine.run_chunk()[1] if t >= 0]
    want = gen.generate(np.array([prompt.ids]), max_new_tokens=6)[0][0]
    assert got == [int(t) for t in want]


def test_the_artifacts_tokenizer_round_trips_text(exported):
    _, gen, path, _ = exported
    art = pxa.load(path)
    ids = art.encode("w5 w9 w17 w3")
    assert ids == [5, 9, 17, 3]
    want, _ = gen.generate(np.asarray([ids]), max_new_tokens=6, eos_token_id=-1)
    assert art.complete("w5 w9 w17 w3", max_new_tokens=6, eos_token_id=-1) == " ".join(WORDS[t] for t in want[0])


PADDLE_FREE = """
import sys
sys.modules["paddle"] = None        # any `import paddle` now raises ImportError
import numpy as np
import paddle_xla.artifact as pxa
art = pxa.load(sys.argv[1])
data = np.load(sys.argv[2])
ids, scores = art.generate(data["ids"], attention_mask=data["mask"], max_new_tokens=7)
np.savez(sys.argv[3], ids=ids, scores=scores, mode=np.array(art.mode))
assert sys.modules["paddle"] is None
"""


def test_runs_where_paddle_is_not_importable(exported, tmp_path):
    _, gen, path, manifest = exported
    ids, mask = _prompts([6, 2, 4, 5], 6, seed=4)
    np.savez(tmp_path / "in.npz", ids=ids, mask=mask)
    env = dict(os.environ, JAX_PLATFORMS="cpu", PADDLE_XLA_CACHE="0")
    proc = subprocess.run(
        [sys.executable, "-c", PADDLE_FREE, path, str(tmp_path / "in.npz"), str(tmp_path / "o.npz")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = np.load(tmp_path / "o.npz")
    want, want_scores = gen.generate(ids, attention_mask=mask, max_new_tokens=7)
    assert str(out["mode"]) == "exported"
    np.testing.assert_array_equal(out["ids"], want)
    np.testing.assert_array_equal(out["scores"], want_scores)


def cli(*args, cwd):
    boot = "import sys; sys.modules['paddle'] = None\nfrom paddle_xla.cli.main import main\nmain()"
    return subprocess.run(
        [sys.executable, "-c", boot, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, JAX_PLATFORMS="cpu"),
    )


def test_cli_generates_text_and_ids_without_paddle(exported, tmp_path):
    _, gen, path, manifest = exported
    want, _ = gen.generate(np.asarray([[5, 9, 17]]), max_new_tokens=5, eos_token_id=-1)
    text = cli("generate", path, "--prompt", "w5 w9 w17", "--max-new-tokens", "5", cwd=tmp_path)
    assert text.returncode == 0, text.stderr[-2000:]
    # NOTE: the config's eos (2, '</s>') may end the text early; the ids run shows every token
    words = [WORDS[t] for t in want[0]]
    assert text.stdout.strip() == " ".join(words[: words.index("</s>")] if "</s>" in words else words)
    ids = cli("generate", path, "--ids", "5,9,17", "--max-new-tokens", "5", cwd=tmp_path)
    assert ids.returncode == 0, ids.stderr[-2000:]
    row = [int(t) for t in ids.stdout.strip().split(",")]
    assert row == list(want[0][: len(row)]) and (len(row) == 5 or row[-1] == 2)
    bad = cli("generate", path, "--ids", "5,900", cwd=tmp_path)
    assert bad.returncode == 2 and "outside the vocabulary" in bad.stderr and "Traceback" not in bad.stderr
    neither = cli("generate", path, cwd=tmp_path)
    assert neither.returncode == 2 and "--prompt" in neither.stderr


def test_a_paddleformers_fast_tokenizer_is_converted_at_export(exported, tmp_path):
    _, gen, _, manifest = exported
    fast = module("transformers.tokenizer_utils").PreTrainedTokenizerFast(tokenizer_object=_tokenizer())
    path = str(tmp_path / "t.pxa")
    px.export(gen, path, tokenizer=fast)
    assert pxa.load(path).encode("w4 w100 nope") == fast("w4 w100 nope", add_special_tokens=False)["input_ids"]


def test_export_and_load_errors_name_the_fix(exported, tmp_path):
    _, gen, path, manifest = exported
    with pytest.raises(ExportError, match="example_inputs"):
        px.export(gen, str(tmp_path / "a.pxa"), example_inputs=[np.zeros((1, 1))])
    with pytest.raises(ExportError, match="no tokenizer.json there"):
        px.export(gen, str(tmp_path / "b.pxa"), tokenizer=str(tmp_path))
    assert not os.path.exists(tmp_path / "b.pxa")
    with pytest.raises(ExportError, match="not a fast tokenizer.*use_fast=True"):
        px.export(gen, str(tmp_path / "b.pxa"), tokenizer=object())
    no_tok = str(tmp_path / "c.pxa")
    px.export(gen, no_tok)
    with pytest.raises(GenerationError, match="holds no tokenizer"):
        pxa.load(no_tok).complete("w5")
    with pytest.raises(GenerationError, match="max_new_tokens=40 does not fit"):
        pxa.load(path).generate(np.asarray([[5, 6]]), max_new_tokens=40)


def test_synthetic_weights_leave_the_matrices_out_and_draw_them_when_loaded(exported, tmp_path):
    """For timing on a machine the weights would take too long to reach (benchmarks/gpu.py): the matrices are
    drawn when loaded, the same ones at every load, and the 1-D weights (RMSNorm scales) travel as they are."""
    net, gen, path, manifest = exported
    synth = str(tmp_path / "synth.pxa")
    written = px.export(gen, synth, synthetic_weights={"std": 0.02, "seed": 3})
    drawn = written["synthetic_weights"]["weights"]
    assert drawn and all(len(w["shape"]) >= 2 for w in drawn.values())
    kept = {k for k in gen.source_weights if k not in drawn}
    assert kept and all(np.ndim(gen.source_weights[k]) < 2 for k in kept)  # the RMSNorm scales, the rotary table
    assert os.path.getsize(synth) < os.path.getsize(path)
    ids, mask = _prompts([7, 3, 5], 7)
    a, b = pxa.load(synth), pxa.load(synth)
    assert a.mode == "exported"
    got = a.generate(ids, attention_mask=mask, max_new_tokens=6)[0]
    np.testing.assert_array_equal(got, b.generate(ids, attention_mask=mask, max_new_tokens=6)[0])
    assert not np.array_equal(got, gen.generate(ids, attention_mask=mask, max_new_tokens=6)[0])
    # NOTE: the same model given the drawn weights, live: the artifact holds and lays them out as it would
    # its own (the k/v projections are not square, so a missed transpose shows)
    twin = _model("llama")
    values = {k: np.asarray(v) for k, v in synthetic_weights.fill(written, {}).items()}
    for mine, theirs in zip(net.parameters(), twin.parameters()):
        if mine.name in values:
            theirs.set_value(values[mine.name])
    live = Generator(twin, max_batch_size=BATCH, max_length=SLOTS, chunk=4)
    np.testing.assert_array_equal(got, live.generate(ids, attention_mask=mask, max_new_tokens=6)[0])


def test_cli_plans_the_memory_of_serving_without_paddle(exported, tmp_path):
    _, gen, path, _ = exported
    g = gen.geometry
    token = 2 * g.layers * g.kv_heads * g.head_dim * 4
    plan = cli("plan-serving", path, "--device", "tpu-v5e", "--kv-cache-tokens", "4096", cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr[-2000:]
    assert f"KV cache: 4096 tokens x {token} bytes" in plan.stdout and "fits" in plan.stdout
    # NOTE: 16 GB holds fewer tokens than this: exit 1, the largest pool that fits named
    too_big = cli(
        "plan-serving", path, "--device", "tpu-v5e", "--kv-cache-tokens", str(16 * 10**9 // token), cwd=tmp_path
    )
    assert too_big.returncode == 1 and "does NOT fit" in too_big.stdout and "--kv-cache-tokens" in too_big.stdout
    both = cli("plan-serving", path, "--kv-cache-tokens", "64", "--kv-cache-memory", "0.5", cwd=tmp_path)
    assert both.returncode == 2 and "not both" in both.stderr
