"""A tiny Llama (random weights) exported with a character-level byte-level BPE tokenizer, so that it can
spell any ASCII text: JSON, regexes, tool calls. Served with --tool-call-parser hermes. The session fixture
`chars_server` (tests/serve/conftest.py) serves it for the structured-output and tool-calling tests."""

from generation.test_generator import _model
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

import paddle_xla as px
from paddle_xla.api.generator import Generator

from .harness import ServeProcess

MODEL = "chars"
ROWS, CONTEXT = 4, 192
SPECIALS = ["[PAD]", "[UNK]", "</s>"]  # NOTE: the tiny models' pad 0 and eos 2
# NOTE: renders the tools' names, an assistant's calls and a tool result's id, so prompt_tokens shows they arrive
TEMPLATE = (
    "{% if tools %}[{% for t in tools %}{{ t.function.name }};{% endfor %}]{% endif %}"
    "{% for m in messages %}<{{ m.role }}>{% if m.tool_calls %}"
    "{% for c in m.tool_calls %}{{ c.function.name }}{{ c.function.arguments | tojson }}{% endfor %}"
    "{% else %}{{ m.content }}{% endif %}{% if m.tool_call_id %}#{{ m.tool_call_id }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


def char_tokenizer() -> Tokenizer:
    """Byte-level BPE over printable ASCII, one token per character (no merges): 99 tokens."""
    chars = [chr(b) for b in range(33, 127)] + ["\u0120", "\u010a"]  # NOTE: byte-level's space and newline
    vocab = {t: i for i, t in enumerate(SPECIALS + chars)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIALS)
    return tok


def serve_chars(folder) -> ServeProcess:
    gen = Generator(_model("llama"), max_batch_size=ROWS, max_length=CONTEXT, chunk=4, prefill_chunk=16)
    px.export(gen, str(folder / f"{MODEL}.pxa"), tokenizer=char_tokenizer(), chat_template=TEMPLATE)
    # NOTE: 256 tokens of KV cache: 4 sequences at once, 2 row buckets of decode programs to compile
    return ServeProcess(str(folder), "--tool-call-parser", "hermes", "--kv-cache-tokens", "256")
