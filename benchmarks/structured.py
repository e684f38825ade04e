"""What structured output costs a served model: decode tokens/s of requests constrained by a JSON schema
against the same requests unconstrained, on the same server, at 1 and at several clients at once.

A constrained request's next mask needs the token it just made, so while one runs the engine decodes a token
per round (generation/paged_engine.py) and llguidance computes each mask on the host: the cost is the lost
multi-step chunk plus the mask. Both sides make the same number of tokens: the schema is one string of
exactly `length` characters, and the unconstrained requests ask for as many tokens with ignore_eos. The
artifact needs a tokenizer llguidance reads: serve_llm.py exports the benchmark model with `char_tokenizer`,
one byte-level token per printable ASCII character (ids past it are never allowed, and decode to nothing).
Run alone, it serves the benchmark model (benchmarks/generate.py's SHAPE) with fewer buckets than
serve_llm.py does, so that it is ready in minutes:

    .venv/bin/python benchmarks/structured.py            # writes benchmarks/results/structured.json
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def char_tokenizer():
    """Byte-level BPE over printable ASCII, one token per character: ids 0-2 [PAD] [UNK] </s>, then 96 more."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    specials = ["[PAD]", "[UNK]", "</s>"]
    chars = [chr(b) for b in range(33, 127)] + ["\u0120", "\u010a"]  # NOTE: byte-level's space and newline
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(specials + chars)}, merges=[], unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(specials)
    return tok


def _schema(length: int) -> dict:
    """A JSON object of one string of exactly `length` characters, {"s":"..."}: `length` + 8 tokens, then the EOS."""
    text = {"type": "string", "minLength": length, "maxLength": length, "pattern": "^[a-z]+$"}
    return {"type": "object", "properties": {"s": text}, "required": ["s"], "additionalProperties": False}


def _decode_rate(http, url: str, body: dict) -> tuple[float, int]:
    """(decode tokens/s after the first token, tokens made) of one streamed completion."""
    stamps = []
    with http.stream("POST", url, json={**body, "stream": True}) as r:
        if r.status_code != 200:
            raise RuntimeError(f"status {r.status_code}: {r.read()[:300]}")
        for line in r.iter_lines():
            if not line.startswith("data:") or line[5:].strip() == "[DONE]":
                continue
            stamps += [time.perf_counter()] * len(json.loads(line[5:])["choices"][0]["token_ids"])
    return (len(stamps) - 1) / (stamps[-1] - stamps[0]), len(stamps)


def structured_cost(url: str, prompts, length: int = 100, clients=(1, 8)) -> dict:
    """Per level: the clients' summed decode tokens/s with the schema, without it, and their ratio."""
    import httpx

    free = {"model": "llm", "max_tokens": length + 9, "temperature": 0, "ignore_eos": True}
    constrained = {"model": "llm", "max_tokens": length + 64, "temperature": 0, "guided_json": _schema(length)}
    out = {"length": length, "levels": []}
    with httpx.Client(timeout=None) as http:
        _decode_rate(http, url, {**constrained, "prompt": prompts[0]})  # NOTE: the schema's first use
        for n in clients:
            level = {"clients": n}
            for name, body in (("without_schema", free), ("with_schema", constrained)):
                with concurrent.futures.ThreadPoolExecutor(n) as pool:
                    runs = list(pool.map(lambda p, b=body: _decode_rate(http, url, {**b, "prompt": p}), prompts[:n]))
                level[name] = {
                    "tokens_per_s": float(sum(r for r, _ in runs)),
                    "tokens": int(np.mean([t for _, t in runs])),
                }
            level["ratio"] = level["with_schema"]["tokens_per_s"] / level["without_schema"]["tokens_per_s"]
            out["levels"].append(level)
    return out


def _parameters(net) -> int:
    return sum(int(np.prod(p.shape)) for p in net.parameters())


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=8, help="the generator's max_batch_size")
    ap.add_argument("--context", type=int, default=384)
    ap.add_argument("--chunk", type=int, default=16, help="decode steps per host call")
    ap.add_argument("--kv-cache-tokens", type=int, default=1024)
    ap.add_argument("--length", type=int, default=100, help="characters of the schema's string")
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "structured.json"))
    args = ap.parse_args()
    sys.path.insert(0, ROOT)
    import paddle
    from common import server_env
    from generate import SHAPE
    from paddleformers.transformers.llama import LlamaConfig, LlamaForCausalLM
    from serve import Service

    import paddle_xla as px
    from paddle_xla.api.generator import Generator

    paddle.seed(0)
    net = LlamaForCausalLM(LlamaConfig(**{**SHAPE, "max_position_embeddings": 1024}))
    net.eval()
    gen = Generator(net, max_batch_size=args.rows, max_length=args.context, chunk=args.chunk, prefill_chunk=64)
    folder = tempfile.mkdtemp(prefix="structured_")
    px.export(gen, os.path.join(folder, "llm.pxa"), tokenizer=char_tokenizer())
    argv = [sys.executable, "-m", "paddle_xla.cli", "serve", folder, "--port", "0"]
    service = Service(
        [*argv, "--kv-cache-tokens", str(args.kv_cache_tokens), "--request-timeout-ms", "0"], server_env()
    )
    rng = np.random.default_rng(0)
    prompts = [[int(i) for i in rng.integers(3, SHAPE["vocab_size"], 64)] for _ in range(max(args.clients))]
    try:
        result = structured_cost(f"http://{service.url}/v1/completions", prompts, args.length, tuple(args.clients))
    finally:
        service.stop()
    result.update(
        model=f"PaddleFormers LlamaForCausalLM, random weights, {_parameters(net) / 1e6:.0f}M parameters",
        rows=args.rows,
        chunk=args.chunk,
        context=args.context,
        server_ready_s=service.ready_s,
        threads=os.cpu_count(),
        when=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    )
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print("| clients | decode tok/s without schema | with schema | ratio |\n|---|---|---|---|")
    for lv in result["levels"]:
        print(
            f"| {lv['clients']} | {lv['without_schema']['tokens_per_s']:.1f} | "
            f"{lv['with_schema']['tokens_per_s']:.1f} | {lv['ratio']:.2f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
