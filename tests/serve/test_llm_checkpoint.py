"""`paddle-xla serve DIR` on a PaddleFormers save_pretrained folder (config, safetensors, tokenizer.json,
tokenizer_config.json's chat template, generation_config.json), and `paddle-xla export DIR -o FILE`: the
served model's tokens are PaddleFormers' own generate's on the same weights, generation_config.json's
eos_token_id list and sampling defaults are honoured, and a restart finds the built artifact in the cache."""

import dataclasses
import json
import os
import re
import subprocess
import sys
import time

import httpx
import numpy as np
import paddle
import pytest
from generation.test_generator_artifact import _tokenizer
from jinja2 import Template
from openai import OpenAI

import paddle_xla.artifact as pxa
from paddle_xla.api import checkpoint_folder as ckpt
from paddle_xla.cli.main import main as cli_main
from paddle_xla.errors import PaddleXlaError

from .checkpoint_server import BOS, PROMPT, ROWS, SPECULATIVE, TEMPLATE, paddle_greedy
from .harness import ROOT


@pytest.fixture(scope="module")
def server(checkpoint_server):
    return checkpoint_server


@pytest.fixture(scope="module")
def client(server):
    return OpenAI(base_url=f"http://{server.url}/v1", api_key="unused", max_retries=0, timeout=60)


def test_the_folder_is_a_model_named_by_the_folder(client, server):
    assert [m.id for m in client.models.list().data] == ["tiny-llama"]
    assert "tiny-llama: capturing LlamaForCausalLM (fp32, max_batch_size 4, max_model_len 64)" in server.output


def test_a_completion_is_paddleformers_generate_with_the_eos_list_and_the_folders_defaults(client, checkpoint):
    folder, net, eos, _ = checkpoint
    r = client.completions.create(model="tiny-llama", prompt=PROMPT, max_tokens=20)  # NOTE: no temperature
    want = paddle_greedy(net, PROMPT, 20, eos)
    want = want[: want.index(eos[1]) + 1]
    choice = r.choices[0]
    assert choice.model_extra["token_ids"] == want and want[-1] == eos[1]
    assert choice.finish_reason == "stop" and r.usage.completion_tokens == len(want)
    # NOTE: a text prompt gets the tokenizer's BOS
    r = client.completions.create(model="tiny-llama", prompt="w5 w9 w14 w20", max_tokens=20)
    made = paddle_greedy(net, [BOS] + PROMPT, 20, eos)
    ends = [i for i, t in enumerate(made) if t in eos]
    want = made[: ends[0] + 1] if ends else made
    assert r.usage.prompt_tokens == len(PROMPT) + 1 and r.choices[0].model_extra["token_ids"] == want


def test_min_tokens_holds_back_every_id_of_the_eos_list(client, checkpoint):
    """vLLM's min_tokens with generation_config's eos list (PaddleFormers' generate refuses a list): the
    reference is greedy decoding on Paddle's own logits with every eos id at -inf for the first k tokens."""
    net, eos = checkpoint[1], checkpoint[2]
    first = paddle_greedy(net, PROMPT, 20, eos)
    k = first.index(eos[1]) + 3  # NOTE: past where the list's second id ended the plain completion
    r = client.completions.create(model="tiny-llama", prompt=PROMPT, max_tokens=k + 6, extra_body={"min_tokens": k})
    got = r.choices[0].model_extra["token_ids"]
    seq, want = list(PROMPT), []
    with paddle.no_grad():
        while len(want) < len(got):
            out = net(paddle.to_tensor([seq]))
            logits = (out.logits if hasattr(out, "logits") else out[0])[0, -1].numpy()
            if len(want) < k:
                logits[eos] = -np.inf
            want.append(int(np.argmax(logits)))
            seq.append(want[-1])
    assert got == want and not set(got[:k]) & set(eos) and len(got) > k
    assert r.choices[0].finish_reason == ("stop" if got[-1] in eos else "length")


def test_vllms_ignore_eos_and_stop_token_ids(client, checkpoint):
    net, eos = checkpoint[1], checkpoint[2]
    kw = dict(model="tiny-llama", prompt=PROMPT, max_tokens=16)
    past = client.completions.create(**kw, extra_body={"ignore_eos": True}).choices[0]
    made = past.model_extra["token_ids"]
    assert len(made) == 16 and past.finish_reason == "length" and eos[1] in made
    # NOTE: greedy, so the same tokens as PaddleFormers' generate up to where an eos would end it
    want = paddle_greedy(net, PROMPT, 16, eos)
    assert made[: len(want)] == want
    k = next(i for i, t in enumerate(made) if i >= 1 and t not in made[:i])
    stopped = client.completions.create(**kw, extra_body={"ignore_eos": True, "stop_token_ids": [made[k]]}).choices[0]
    assert stopped.model_extra["token_ids"] == made[: k + 1] and stopped.finish_reason == "stop"
    assert stopped.text == " ".join(f"w{t}" for t in made[: k + 1])


def test_chat_renders_the_folders_template_once_with_its_bos_and_the_requests_template_arguments(client):
    messages = [{"role": "user", "content": "w5 w9"}]

    def prompt_tokens(**kw):
        r = client.chat.completions.create(model="tiny-llama", messages=messages, max_tokens=3, **kw)
        return r.usage.prompt_tokens

    def rendered(**kw):
        text = Template(TEMPLATE).render(messages=messages, bos_token="w3", **kw)
        return len(_tokenizer().encode(text).ids)  # NOTE: the template's BOS alone, not a second one

    assert prompt_tokens() == rendered(add_generation_prompt=True)
    thinking = prompt_tokens(extra_body={"chat_template_kwargs": {"enable_thinking": True}})
    assert thinking == rendered(add_generation_prompt=True, enable_thinking=True) == prompt_tokens() + 1
    assert prompt_tokens(extra_body={"add_generation_prompt": False}) == rendered(add_generation_prompt=False)


def test_a_restart_finds_the_artifact_in_the_cache_and_a_changed_folder_builds_again(
    server, checkpoint, monkeypatch, tmp_path
):
    folder, _, _, cache = checkpoint
    monkeypatch.setenv("PADDLE_XLA_CACHE_DIR", cache)
    options = ckpt.BuildOptions(max_batch_size=ROWS, speculative_config=SPECULATIVE)
    path = ckpt.cache_path(folder, options)
    assert f"exported to {path} " in server.output  # NOTE: PaddleFormers wrote flex-ckpt metadata since
    lines = []
    assert ckpt.built(folder, options, lines.append, str(tmp_path)) == path
    assert lines == [f"{folder}: its artifact is in the cache: {path}"]
    assert ckpt.cache_path(folder, ckpt.BuildOptions(max_batch_size=ROWS, speculative_config="")) != path
    assert ckpt.cache_path(folder, dataclasses.replace(options, max_model_len=32)) != path
    # NOTE: one config, however it is spelled, is one build
    spelled = json.dumps(json.loads(SPECULATIVE), indent=2)
    assert ckpt.cache_path(folder, ckpt.BuildOptions(max_batch_size=ROWS, speculative_config=spelled)) == path
    # NOTE: the server's build recorded what it was built from, beside it
    with open(path[: -len(".pxa")] + ".json") as f:
        assert json.load(f) == {"folder": os.path.abspath(folder), "options": dataclasses.asdict(options)}
    config = os.path.join(folder, "generation_config.json")
    stat = os.stat(config)
    os.utime(config, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert ckpt.cache_path(folder, options) != path


def test_a_new_build_deletes_the_artifacts_it_replaces_and_no_other(tmp_path):
    """Cached artifacts of the same folder and options go (an older checkpoint); those of another folder of
    the same name, of other options, and files that are not our records stay."""
    cache = tmp_path / "checkpoints"
    cache.mkdir()
    here, there = tmp_path / "a" / "m", tmp_path / "b" / "m"
    options, other = ckpt.BuildOptions(max_batch_size=2), ckpt.BuildOptions(max_batch_size=4)

    def cached(key, folder, opts):
        (cache / f"m-{key}.pxa").write_bytes(b"artifact")
        record = {"folder": os.path.abspath(folder), "options": dataclasses.asdict(opts)}
        (cache / f"m-{key}.json").write_text(json.dumps(record))

    cached("old", here, options)
    # NOTE: a record written before an option existed: its build had the option's default
    cached("older", here, options)
    record = json.loads((cache / "m-older.json").read_text())
    del record["options"]["speculative_config"]
    (cache / "m-older.json").write_text(json.dumps(record))
    cached("twin", there, options)
    cached("other", here, other)
    (cache / "notes.json").write_text("not json")
    (cache / "m-new.pxa").write_bytes(b"artifact")
    gone = ckpt.replaced(str(cache / "m-new.pxa"), str(here), options)
    assert sorted(gone) == [str(cache / "m-old.pxa"), str(cache / "m-older.pxa")]
    left = sorted(p.name for p in cache.iterdir())
    assert left == ["m-new.json", "m-new.pxa", "m-other.json", "m-other.pxa", "m-twin.json", "m-twin.pxa", "notes.json"]
    assert ckpt.replaced(str(cache / "m-new.pxa"), str(here), options) == []


def test_export_writes_the_artifact_the_server_built(server, checkpoint, tmp_path, monkeypatch):
    folder, _, eos, cache = checkpoint
    monkeypatch.setenv("PADDLE_XLA_CACHE_DIR", cache)
    out = str(tmp_path / "tiny.pxa")
    with pytest.raises(SystemExit) as done:
        cli_main(["export", folder, "-o", out, "--max-batch-size", str(ROWS), "--speculative-config", SPECULATIVE])
    assert done.value.code == 0
    served = pxa.load(re.search(r"exported to (\S+\.pxa) ", server.output).group(1))
    exported = pxa.load(out)
    # NOTE: two captures differ in value numbering and Paddle's parameter names, not in what they compute
    tokenizer = "tokenizer.json"
    assert exported.manifest["members"][tokenizer] == served.manifest["members"][tokenizer]
    assert exported.geometry == served.geometry and exported.manifest["chat"] == served.manifest["chat"]
    (tokens, scores), (want, want_scores) = (
        a.generate(np.array([PROMPT]), max_new_tokens=8) for a in (exported, served)
    )
    np.testing.assert_array_equal(tokens, want)
    np.testing.assert_array_equal(scores, want_scores)
    assert exported.defaults.eos_token_id == tuple(eos)
    assert exported.manifest["generation"]["request_defaults"] == {"temperature": 0.0}


def test_a_length_past_the_models_window_stops_the_start_up_naming_both(checkpoint, tmp_path):
    folder = checkpoint[0]
    result = subprocess.run(
        [sys.executable, "-m", "paddle_xla.cli", "serve", folder, "--port", "0", "--max-model-len", "100"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PADDLE_XLA_CACHE_DIR": str(tmp_path / "jax")},
        timeout=120,
    )
    assert result.returncode == 1
    assert "max_model_len=100 is past" in result.stderr and "max_position_embeddings=64" in result.stderr


def test_the_server_speculates_by_prompt_lookup_with_paddles_tokens_and_counts_it(client, server, checkpoint):
    """--speculative-config: the server's rounds verify prompt-lookup guesses over the block tables; a
    repeating prompt's greedy completion is Paddle's own, and /metrics counts the guesses made and kept."""
    _, net, eos, _ = checkpoint
    assert "tiny-llama: speculative decoding by ngram, 3 guesses a round" in server.output
    assert "speculative chunk of 4 rows" in server.output
    loop = [7, 30, 9, 7, 30, 9, 7, 30, 9, 7, 30]
    with httpx.Client(base_url=f"http://{server.url}", timeout=30) as http:
        before = http.get("/metrics").text
        r = client.completions.create(model="tiny-llama", prompt=loop, max_tokens=24, temperature=0)
        after = _metrics_after(http, before)
    made = paddle_greedy(net, loop, 24, eos)
    ends = [i for i, t in enumerate(made) if t in eos]
    assert r.choices[0].model_extra["token_ids"] == (made[: ends[0] + 1] if ends else made)
    labels = SPEC_LABELS
    grew = {
        name: _metric(after, f"paddle_xla_llm_spec_{name}_total{labels}")
        - _metric(before, f"paddle_xla_llm_spec_{name}_total{labels}")
        for name in ("verify_steps", "draft_tokens", "accepted_tokens")
    }
    assert grew["verify_steps"] > 0 and 0 < grew["accepted_tokens"] <= grew["draft_tokens"], grew
    assert 0 < _metric(after, f"paddle_xla_llm_spec_acceptance_rate{labels}") <= 1


SPEC_LABELS = '{method="ngram",model="tiny-llama"}'


def _metrics_after(http, before: str, bound_s: float = 10.0) -> str:
    """/metrics once the scheduler has counted the last chunk (it sets the series after sending its tokens)."""
    series = f"paddle_xla_llm_spec_verify_steps_total{SPEC_LABELS}"
    start = time.monotonic()
    while True:
        text = http.get("/metrics").text
        if _metric(text, series) > _metric(before, series) or time.monotonic() - start > bound_s:
            return text
        time.sleep(0.05)


def _metric(text: str, series: str) -> float:
    lines = [line for line in text.splitlines() if line.startswith(series + " ")]
    return float(lines[0].split()[-1]) if lines else 0.0


@pytest.mark.parametrize(
    "given, names",
    [
        ("{ngram", "is not JSON"),
        ('["ngram"]', "must be a JSON object"),
        ('{"method": "draft_model", "model": "small/", "num_speculative_tokens": 4}', "method='draft_model'"),
        ('{"method": "ngram", "num_speculative_tokens": 0}', "num_speculative_tokens=0 must be an integer >= 1"),
        ('{"method": "ngram", "num_speculative_tokens": 4, "lookup": 3}', "unknown keys ['lookup']"),
    ],
)
def test_a_bad_speculative_config_is_refused_before_anything_loads(given, names):
    with pytest.raises(PaddleXlaError, match="--speculative-config") as e:
        ckpt.BuildOptions(speculative_config=given)
    assert names in str(e.value)


def test_vllms_older_ngram_spellings_are_one_config_and_one_cache_key():
    plain = ckpt.BuildOptions(speculative_config='{"method": "ngram", "num_speculative_tokens": 3}')
    for given in (
        '{"model": "[ngram]", "num_speculative_tokens": 3}',
        '{"num_speculative_tokens": 3, "method": "[ngram]"}',
    ):
        assert ckpt.BuildOptions(speculative_config=given).speculative_config == plain.speculative_config
