"""A PaddleFormers checkpoint folder as a generator artifact, built once and kept in paddle_xla's cache.

A checkpoint folder is what `save_pretrained` writes: config.json, the weights (*.safetensors or
*.pdparams), the tokenizer files and maybe generation_config.json. `paddle-xla serve DIR` serves one (or
each such folder inside DIR) and `paddle-xla export DIR -o FILE` writes its artifact, as vLLM's `vllm
serve ./folder` takes a folder. Building it loads the model with PaddleFormers, captures it as a
px.Generator and exports it with the folder's tokenizer.json, chat template, and generation_config.json's
eos_token_id (every id of a list ends a completion) and sampling defaults.

The artifact is kept under paddle_xla's cache folder, keyed by the folder's files (names, sizes,
modification times), the build options and paddle_xla's versions: a restart finds it without Paddle, and a
changed checkpoint is built again. Beside each artifact a small NAME-KEY.json records the folder and options
it was built from; a new build of the same folder and options deletes the ones it replaces (a training run
that saves into one folder would otherwise fill the disk, an artifact per save). The module imports paddle
only to build."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import json
import os
import time
from collections.abc import Callable
from typing import Any

from ..errors import ExportError, GenerationError, PaddleXlaError
from ..files import atomic_write
from ..generation.speculative.config import plain_spelling, speculative_config

CONFIG = "config.json"
GENERATION_CONFIG = "generation_config.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
WEIGHT_SUFFIXES = (".safetensors", ".safetensors.index.json", ".pdparams")
# NOTE: the files a build reads; PaddleFormers writes flex-ckpt.* metadata into the folder as it loads, which
# must not make the next start miss the cache
KEYED_SUFFIXES = (".json", ".safetensors", ".pdparams", ".model", ".jinja", ".txt", ".tiktoken")
DEFAULT_MAX_LENGTH = 4096  # NOTE: a model's own window is often 128k; longer takes --max-model-len
DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
# NOTE: generation_config.json's fields a request that leaves them out takes (vLLM's --generation-config auto)
SAMPLING_DEFAULTS = ("temperature", "top_p", "top_k", "repetition_penalty")
NGRAM_EXAMPLE = '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}'


@dataclasses.dataclass(frozen=True)
class BuildOptions:
    """How a checkpoint becomes a generator: vLLM's names where it has them."""

    max_batch_size: int = 8
    max_model_len: int = 0  # 0: the model's max_position_embeddings, at most DEFAULT_MAX_LENGTH
    dtype: str = "auto"  # auto (the checkpoint's own) | float32 | bfloat16 | float16
    speculative_config: str = ""  # vLLM's --speculative-config: JSON of px.Generator's speculative_config

    def __post_init__(self) -> None:
        if self.dtype != "auto" and self.dtype not in DTYPES:
            raise ExportError(f"dtype={self.dtype!r}: give auto, {', '.join(DTYPES)}")
        given = self.speculation()  # NOTE: checked before anything loads
        if given is not None:  # NOTE: one spelling per config, so that one cache key holds it
            object.__setattr__(self, "speculative_config", json.dumps(given, sort_keys=True))
        if self.max_batch_size < 1 or self.max_model_len < 0:
            raise ExportError(
                f"max_batch_size={self.max_batch_size}, max_model_len={self.max_model_len}: "
                "give a batch of at least 1 and a length of at least 1 (0: the model's own)"
            )

    def speculation(self) -> dict | None:
        """speculative_config as px.Generator takes it, or None; an ExportError naming what is wrong. A
        checkpoint speculates by prompt lookup: a draft model is a Python object (px.Generator takes one)."""
        if not self.speculative_config:
            return None
        try:
            given = json.loads(self.speculative_config)
        except json.JSONDecodeError as e:
            raise ExportError(f"--speculative-config is not JSON ({e}): give e.g. {NGRAM_EXAMPLE}") from None
        if not isinstance(given, dict):
            raise ExportError(f"--speculative-config must be a JSON object, e.g. {NGRAM_EXAMPLE}")
        given = plain_spelling(given)
        if given.get("method") != "ngram" or "model" in given:
            raise ExportError(
                f"--speculative-config method={given.get('method')!r}: a checkpoint folder speculates by prompt "
                f"lookup, e.g. {NGRAM_EXAMPLE} (a draft model: px.Generator(target, speculative_config={{'model': "
                "draft, ...}}) and px.export)"
            )
        try:
            speculative_config(given, max_length=2**31)
        except GenerationError as e:
            raise ExportError(f"--speculative-config: {e}") from None
        return given


def is_checkpoint(path: str) -> bool:
    """Whether `path` is a folder holding config.json and weights (a save_pretrained checkpoint)."""
    if not os.path.isfile(os.path.join(path, CONFIG)):
        return False
    return any(f.endswith(WEIGHT_SUFFIXES) for f in os.listdir(path))


def checkpoints_in(folder: str) -> dict[str, str]:
    """name -> path of each checkpoint `folder` is or holds: the folder itself (named by its base name), else
    each subfolder that is one (named by its own name)."""
    folder = os.path.abspath(folder)
    if is_checkpoint(folder):
        return {os.path.basename(folder): folder}
    subs = sorted(e.path for e in os.scandir(folder) if e.is_dir())
    return {os.path.basename(p): p for p in subs if is_checkpoint(p)}


def read_config(folder: str, name: str) -> dict:
    path = os.path.join(folder, name)
    if not os.path.isfile(path):
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        raise ExportError(f"{path} is not readable JSON ({e}); fix or remove it") from None
    if not isinstance(data, dict):
        raise ExportError(f"{path} must hold a JSON object")
    return data


def max_length_of(folder: str, options: BuildOptions) -> int:
    """The longest prompt plus completion the generator takes: max_model_len, else the model's window capped
    at DEFAULT_MAX_LENGTH; past the model's window is refused, naming both."""
    window = read_config(folder, CONFIG).get("max_position_embeddings")
    if not options.max_model_len:
        return min(window, DEFAULT_MAX_LENGTH) if isinstance(window, int) else DEFAULT_MAX_LENGTH
    if isinstance(window, int) and options.max_model_len > window:
        raise ExportError(
            f"max_model_len={options.max_model_len} is past {folder}'s max_position_embeddings={window}: "
            f"give at most {window}"
        )
    return options.max_model_len


def precision_of(folder: str, options: BuildOptions) -> str:
    """The Strategy precision: the dtype asked for, or (auto) the checkpoint's own dtype, fp32 when unsaid."""
    if options.dtype != "auto":
        return DTYPES[options.dtype]
    config = read_config(folder, CONFIG)
    return DTYPES.get(str(config.get("dtype") or config.get("torch_dtype") or "float32"), "fp32")


def cache_key(folder: str, options: BuildOptions) -> str:
    from .. import __version__
    from ..lowering.policy import LOWERING_VERSION

    # NOTE: Paddle's and PaddleFormers' versions too: a fix to a model's code builds it again
    versions = [__version__, LOWERING_VERSION, _version("paddlepaddle"), _version("paddleformers")]
    h = hashlib.sha256(json.dumps([*versions, os.path.abspath(folder), dataclasses.asdict(options)]).encode())
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        if entry.is_file() and entry.name.endswith(KEYED_SUFFIXES):
            st = entry.stat()
            h.update(f"{entry.name}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:20]


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def cache_path(folder: str, options: BuildOptions) -> str | None:
    """Where the folder's artifact is kept: beside JAX's compiled programs in paddle_xla's cache; None when
    the cache is off (PADDLE_XLA_CACHE=0)."""
    from ..runtime.compile_cache import cache_dir

    base = cache_dir()
    if base is None:
        return None
    name = os.path.basename(os.path.abspath(folder))
    return os.path.join(os.path.dirname(base), "checkpoints", f"{name}-{cache_key(folder, options)}.pxa")


def built(folder: str, options: BuildOptions, progress: Callable[[str], None], scratch: str) -> str:
    """The artifact of checkpoint `folder`: from the cache when it is there, else built now (into the cache,
    or into `scratch` when the cache is off)."""
    path = cache_path(folder, options)
    if path is not None and os.path.isfile(path):
        progress(f"{folder}: its artifact is in the cache: {path}")
        return path
    if path is None:
        path = os.path.join(scratch, os.path.basename(os.path.abspath(folder)) + ".pxa")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    export_checkpoint(folder, path, options, progress)
    if os.path.dirname(path) != scratch:
        for stale in replaced(path, folder, options):
            progress(f"{folder}: removed the artifact this build replaces: {stale}")
    return path


def replaced(path: str, folder: str, options: BuildOptions) -> list[str]:
    """Record what the cached artifact `path` was built from (a JSON beside it), and delete the cached
    artifacts of the same folder and options built before it (an older checkpoint or paddle_xla); returns
    those it deleted. Another folder's artifacts are left alone, whatever its name."""
    built_from = {"folder": os.path.abspath(folder), "options": dataclasses.asdict(options)}
    atomic_write(path[: -len(".pxa")] + ".json", json.dumps(built_from).encode())
    gone = []
    for entry in os.scandir(os.path.dirname(path)):
        other = entry.path[: -len(".json")] + ".pxa"
        if not entry.name.endswith(".json") or other == path:
            continue
        try:
            with open(entry.path) as f:
                record = json.load(f)
            # NOTE: a record written before an option existed holds its default (a build of then)
            record["options"] = {**dataclasses.asdict(BuildOptions()), **record["options"]}
            same = record == built_from
        except (OSError, ValueError, TypeError, KeyError):
            continue  # NOTE: not a record of ours, or being written: left alone
        if same:
            for stale in (other, entry.path):
                if os.path.exists(stale):
                    os.remove(stale)
            gone.append(other)
    return gone


def export_checkpoint(
    folder: str,
    path: str,
    options: BuildOptions,
    progress: Callable[[str], None] = print,
    platforms: tuple[str, ...] = ("cpu",),
) -> dict[str, Any]:
    """Load checkpoint `folder` with PaddleFormers, capture it and write its generator artifact to `path`
    (atomically); the manifest. Needs Paddle and PaddleFormers (`paddle-xla install paddleformers`)."""
    from ..artifact.generator_writer import export_generator
    from ..generation.config import token_ids
    from ..strategy import Strategy
    from .generator import Generator

    start = time.monotonic()
    max_length, precision = max_length_of(folder, options), precision_of(folder, options)
    model = _paddleformers_model(folder)
    progress(
        f"{folder}: capturing {type(model).__name__} ({precision}, max_batch_size {options.max_batch_size}, "
        f"max_model_len {max_length})"
    )
    try:
        gen = Generator(
            model,
            max_batch_size=options.max_batch_size,
            max_length=max_length,
            strategy=Strategy(precision=precision),
            speculative_config=options.speculation(),
        )
    except PaddleXlaError:
        raise
    except Exception as e:  # NOTE: Paddle's own failure while capturing: named, not a traceback
        raise ExportError(f"capturing {folder} failed: {type(e).__name__}: {e}") from None
    generation = read_config(folder, GENERATION_CONFIG)
    if generation.get("eos_token_id") is not None:
        # NOTE: PaddleFormers 1.2's generate reads the model config's; generation_config.json's list is the
        # model's own word on which ids end a turn (vLLM and Transformers take it)
        pad = generation.get("pad_token_id")
        pad = gen.defaults.pad_token_id if pad is None else pad
        gen.defaults = dataclasses.replace(
            gen.defaults, eos_token_id=token_ids(generation["eos_token_id"]), pad_token_id=pad
        )
    tokenizer = _tokenizer(folder, progress)
    manifest = export_generator(
        gen,
        path,
        platforms=platforms,
        tokenizer=tokenizer,
        chat_template=tokenizer.chat_template if tokenizer is not None else None,
        request_defaults={k: generation[k] for k in SAMPLING_DEFAULTS if generation.get(k) is not None},
    )
    progress(f"{folder}: exported to {path} ({time.monotonic() - start:.1f} s)")
    return manifest


def _paddleformers_model(folder: str) -> Any:
    try:
        from paddleformers.transformers import AutoModelForCausalLM
    except ImportError:
        raise ExportError(
            f"{folder} is a PaddleFormers checkpoint, and building it needs PaddleFormers: run "
            "`paddle-xla install paddleformers` (or serve the .pxa that `paddle-xla export` writes from it)"
        ) from None
    try:
        # NOTE: float32 on the host; the Strategy's precision says how the device computes
        model = AutoModelForCausalLM.from_pretrained(folder, dtype="float32")
    except Exception as e:
        raise ExportError(f"PaddleFormers cannot load {folder} as a causal LM: {type(e).__name__}: {e}") from None
    model.eval()
    return model


@dataclasses.dataclass(frozen=True)
class _Tokenizer:
    """The folder's tokenizer.json path with tokenizer_config.json's chat template and special tokens, as
    export_generator reads a tokenizer."""

    path: str
    chat_template: str | None
    bos_token: str | None
    eos_token: str | None

    def __fspath__(self) -> str:
        return self.path


def _tokenizer(folder: str, progress: Callable[[str], None]) -> _Tokenizer | None:
    path = os.path.join(folder, "tokenizer.json")
    if not os.path.isfile(path):
        progress(f"{folder}: no tokenizer.json (a fast tokenizer's file): it is served for token-id prompts only")
        return None
    config = read_config(folder, TOKENIZER_CONFIG)
    template = config.get("chat_template")
    if isinstance(template, list):  # NOTE: named templates, as Transformers saves several: the default one
        template = next((t.get("template") for t in template if t.get("name") == "default"), None)
    jinja = os.path.join(folder, "chat_template.jinja")
    if template is None and os.path.isfile(jinja):
        with open(jinja, encoding="utf-8") as f:
            template = f.read()
    return _Tokenizer(path, template, _token_text(config.get("bos_token")), _token_text(config.get("eos_token")))


def _token_text(token: object) -> str | None:
    if isinstance(token, dict):  # NOTE: an AddedToken saved as {"content": ..., ...}
        token = token.get("content")
    return token if isinstance(token, str) else None
