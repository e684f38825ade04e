"""A language model's compiles show progress as an ordinary model's do: `paddle-xla serve` logs one line per
warm-up program ("NAME: compiled prefill bucket 16 (2/4, 1.3 s)", as warmup.py's "NAME: compiled x[8, 4]
(1/3, 0.4 s)"), and `paddle-xla generate` / px.Generator show each program's first compile through
compile_progress, as px.compile does."""

import re
import subprocess
import sys

import numpy as np
import pytest
from generation.test_generator import _model
from generation.test_generator_artifact import _tokenizer
from xla_flags import child_env

import paddle_xla as px
from paddle_xla.api.generator import Generator

from .harness import ROOT, ServeProcess

LOG_NOW = {"PADDLE_XLA_PROGRESS_DELAY": "0", "PADDLE_XLA_CACHE": "0"}  # NOTE: a line for every compile, none cached


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(served folder, the live Generator): context 32, so two prefill buckets (16, 32)."""
    folder = tmp_path_factory.mktemp("llm_progress")
    gen = Generator(_model("llama"), max_batch_size=2, max_length=32, chunk=4)
    px.export(gen, str(folder / "tiny.pxa"), tokenizer=_tokenizer())
    return str(folder), gen


def test_serve_logs_each_paged_engine_compile_with_its_count(tiny):
    # NOTE: context 32 in blocks of 16, 2 rows: prefill buckets 16 and 32, a prompt's log-probabilities, another
    # choice of a prefilled prompt, decode over 1, 2 and 3 blocks
    server = ServeProcess(tiny[0], env=LOG_NOW)
    try:
        lines = [line for line in server.lines if ": compiled " in line]
    finally:
        server.stop()
    assert (
        "tiny: paged KV cache of 64 tokens in blocks of 16, up to 2 requests at once, no prefix cache; "
        "compiling 7 programs" in (server.output)
    )
    for what in (
        "prefill bucket 16 and a cancelled request's free",
        "prefill bucket 32",
        r"a prompt's log-probabilities \(echo\)",
        r"another choice of a prefilled prompt \(n\)",
        "decode chunk of 2 rows over 3 blocks of 16",
    ):
        assert any(re.search(rf"tiny: compiled {what} \(\d/7, \d+\.\d s\)", line) for line in lines), (what, lines)
    counts = [re.search(r"\((\d+)/(\d+),", line).groups() for line in lines]
    assert [(int(i), int(n)) for i, n in counts] == [(i, 7) for i in range(1, 8)], lines


def test_serve_logs_each_language_model_compile_with_its_count(tiny):
    server = ServeProcess(tiny[0], "--no-paged-kv-cache", env=LOG_NOW)
    try:
        lines = [line for line in server.lines if ": compiled " in line]
    finally:
        server.stop()
    assert any(
        re.search(
            r"paddle-xla serve: tiny: compiled prefill bucket 16 and the decode chunk of 4 tokens "
            r"\(2/\d+, \d+\.\d s\)",
            line,
        )
        for line in lines
    ), server.output
    assert any(re.search(r"tiny: compiled prefill bucket 32 \(3/\d+, \d+\.\d s\)", line) for line in lines), lines
    counts = [re.search(r"\((\d+)/(\d+),", line).groups() for line in lines]
    assert [int(i) for i, _ in counts] == list(range(1, len(counts) + 1)) and {n for _, n in counts} == {
        str(len(counts))
    }, lines


def test_the_generate_command_shows_each_programs_compile(tiny):
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "paddle_xla.cli",
            "generate",
            f"{tiny[0]}/tiny.pxa",
            "--ids",
            "5,9",
            "--max-new-tokens",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        env=child_env(**LOG_NOW),
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert "paddle_xla: compiling tiny: prefill bucket 16 (batch of 2 rows, context 32) ..." in res.stderr, res.stderr
    assert re.search(r"paddle_xla: compiled tiny: decode chunk of 4 tokens .* in \d+\.\d s", res.stderr), res.stderr


def test_a_generators_first_compiles_show_progress_in_python(tiny, capsys, monkeypatch):
    for name, value in LOG_NOW.items():
        monkeypatch.setenv(name, value)
    gen = tiny[1]
    gen.generate(np.array([[5, 9, 11]]), max_new_tokens=2)
    err = capsys.readouterr().err
    assert "paddle_xla: compiling LlamaForCausalLM: prefill bucket 16 (batch of 2 rows, context 32) ..." in err, err
    gen.generate(np.array([[5, 9, 12]]), max_new_tokens=2)
    assert "compiling" not in capsys.readouterr().err  # NOTE: compiled once, shown once
