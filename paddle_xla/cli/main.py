"""`paddle-xla`: check, export, plan, plan-serving, validate, bench, demo, run, generate, serve, launch, install.

A user's mistake (a PaddleXlaError, a bad MODULE:FACTORY, a missing extra) ends in one line on
stderr that names the fix, and exit status 2; --verbose shows the traceback too (main)."""

from __future__ import annotations

import importlib
import inspect
import os
import re
import sys
from typing import Any

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Run PaddlePaddle models on any XLA device.")
SPEC_HELP = "NAME:DTYPE[d0,d1,...], -1 = any size, e.g. x:float32[-1,3,224,224] (once per input)"
_SPEC_OPTION_HELP = SPEC_HELP.replace("[", "\\[")  # NOTE: rich reads [...] in --help as markup
# NOTE: what each optional part needs, for the one line a missing module gets
_EXTRAS = {
    "paddle": "pip install 'paddle_xla[paddle]' (capture needs Paddle; running a .pxa does not)",
    "starlette": "pip install 'paddle_xla[serve]'",
    "uvicorn": "pip install 'paddle_xla[serve]'",
    "prometheus_client": "pip install 'paddle_xla[serve]'",
}


class TargetError(Exception):
    """A MODULE:FACTORY that cannot be loaded: the one-line message names the fix."""


def main(argv: list[str] | None = None) -> None:
    """The `paddle-xla` command: the typer app, with a user's mistakes answered in one line."""
    argv = list(sys.argv[1:] if argv is None else argv)
    from ..errors import PaddleXlaError

    try:
        app(args=argv, prog_name="paddle-xla")
    except (PaddleXlaError, TargetError, ModuleNotFoundError) as e:
        if "--verbose" in argv or "-v" in argv:
            raise
        typer.echo(f"error: {_one_line(e)}", err=True)
        sys.exit(2)


def _one_line(e: Exception) -> str:
    if isinstance(e, ModuleNotFoundError) and (e.name or "").split(".")[0] in _EXTRAS:
        top = (e.name or "").split(".")[0]
        return f"this needs {top!r}, which is not installed: {_EXTRAS[top]}"
    text = " ".join(str(e).split())
    return text if len(text) <= 400 else text[:400] + " ... (--verbose shows all)"


@app.callback()
def _options(
    verbose: bool = typer.Option(
        False, "--verbose", "-v", help="Show Paddle's and JAX's start-up logs and warnings too"
    ),
):
    from .. import quiet

    quiet.show_everything() if verbose else quiet.quiet_start_up_noise()


_SPEC = re.compile(r"^(?P<name>\w+):(?P<dtype>\w+)\[(?P<dims>[-\d,\s]*)\]$")


def parse_input_spec(text: str):
    """'x:float32[-1,3,224,224]' -> InputSpec([None,3,224,224], 'float32', 'x')."""
    from paddle.static import InputSpec

    m = _SPEC.match(text.strip())
    if not m:
        raise typer.BadParameter(f"{text!r} is not NAME:DTYPE[d0,d1,...], e.g. x:float32[-1,3,224,224]")
    dims = [int(d) for d in m["dims"].split(",") if d.strip()]
    return InputSpec([None if d < 0 else d for d in dims], m["dtype"], m["name"])  # type: ignore[arg-type]  # NOTE: Paddle's stub lists dtype names as literals


def load_target(target: str):
    """'pkg.module:factory' -> the object factory() returns: a function or a Layer class is called with no
    arguments, a Layer (or anything not callable) is taken as it is."""
    module_name, _, attr = target.partition(":")
    if not attr or not module_name:
        raise TargetError(
            f"{target!r} is not MODULE:FACTORY, e.g. paddle.vision.models:resnet18 (a colon "
            "between the module and the function that builds the model)"
        )
    sys.path.insert(0, ".")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] in _EXTRAS:
            raise
        raise TargetError(
            f"cannot import {module_name!r} (from {target!r}): {e}. Give MODULE:FACTORY with a "
            "module on the Python path (the current folder is on it)"
        ) from None
    if not hasattr(module, attr):
        raise TargetError(
            f"module {module_name!r} has no {attr!r} (from {target!r}); give MODULE:FACTORY, "
            f"e.g. {module_name}:{_a_callable(module) or 'build_model'}"
        )
    obj = getattr(module, attr)
    # NOTE: a Layer class (paddle.vision.models:LeNet) has `forward` too, but is built like a factory
    if not isinstance(obj, type) and (not callable(obj) or hasattr(obj, "forward")):
        return obj
    try:
        inspect.signature(obj).bind()
    except TypeError as e:
        raise TargetError(
            f"{target!r} cannot be built without arguments ({e}); give a function that builds it, "
            f"e.g. def build(): return {attr}(...) in a module of your own"
        ) from None
    except ValueError:
        pass  # NOTE: no signature to read (a builtin): call it and let its own error speak
    return obj()  # NOTE: an error inside the user's constructor keeps its own traceback


def _a_callable(module) -> str | None:
    return next((n for n, v in vars(module).items() if callable(v) and not n.startswith("_")), None)


def _model_or_saved(target: str):
    """MODULE:FACTORY -> the Layer; anything else must be a saved inference model's path prefix."""
    if ":" in target:
        return load_target(target)
    if not any(os.path.exists(target + ext) for ext in (".json", ".pdmodel")):
        raise TargetError(
            f"{target!r} is neither MODULE:FACTORY (e.g. paddle.vision.models:resnet18: note the "
            "colon) nor the path prefix of a saved inference model (PREFIX.json or PREFIX.pdmodel, "
            "with PREFIX.pdiparams)"
        )
    return target


def _specs_for(target: str, input_spec: list[str] | None):
    specs = [parse_input_spec(s) for s in input_spec or []]
    if ":" in target and not specs:
        raise TargetError(f"{target} is a Layer, so its inputs need describing: add --input-spec {SPEC_HELP}")
    return specs


_PADDLE_REFUSAL = re.compile(r"\(InvalidArgument\)\s*(?P<what>.*?)(?:\[Hint|\(at /|$)", re.S)
_SHAPE_IN_MESSAGE = re.compile(r"shape is \[(?P<dims>[-\d,\s]+)\]")


def _captured(target: str, input_spec: list[str] | None, capture):
    """capture() (px.compile / px.check of the model); where Paddle refuses an --input-spec's shape while
    capturing (a wrong rank or size: Paddle's InvalidArgument), one line naming the input, the spec given,
    what the model expected and the fix, instead of Paddle's traceback."""
    from ..errors import CaptureError

    try:
        return capture()
    except CaptureError as e:
        refusal = _PADDLE_REFUSAL.search(str(e)) if input_spec else None
        if refusal is None or not input_spec:
            raise
        said = " ".join(refusal["what"].split()).rstrip(" .")
        shape = _SHAPE_IN_MESSAGE.search(said)
        named = [t for t in input_spec if shape and _spec_dims(t) == [int(d) for d in shape["dims"].split(",")]]
        if not named:  # NOTE: Paddle's message names no given shape: the spec may not be what it refuses
            raise CaptureError(
                f"capturing {target} with --input-spec {', '.join(input_spec)} failed: Paddle says: {said}. "
                f"Check that each input has the rank and sizes its forward expects ({SPEC_HELP})"
            ) from e
        inputs = "input" if len(named) == 1 else "inputs"
        raise CaptureError(
            f"{target} does not accept the {inputs} --input-spec {', '.join(named)}: Paddle says: {said}. "
            f"Give each input the rank and sizes its forward expects ({SPEC_HELP})"
        ) from e


def _spec_dims(text: str) -> list[int]:
    m = _SPEC.match(text.strip())
    return [int(d) for d in m["dims"].split(",") if d.strip()] if m else []


@app.command()
def check(
    target: str = typer.Argument(
        ..., help="MODULE:FACTORY returning a paddle.nn.Layer, or a saved model's path prefix"
    ),
    input_spec: list[str] | None = typer.Option(None, "--input-spec", help=_SPEC_OPTION_HELP),
    train: bool = typer.Option(False, help="capture in train mode"),
):
    """Coverage report: every op the model uses, and each unsupported one with its source line."""
    import paddle_xla as px

    model, specs = _model_or_saved(target), _specs_for(target, input_spec)
    report = _captured(target, input_spec, lambda: px.check(model, specs, training=train if ":" in target else None))
    typer.echo(report.describe())
    raise typer.Exit(0 if report.ok else 1)


@app.command()
def plan(
    target: str = typer.Argument(
        ...,
        help="MODULE:FACTORY returning a paddle.nn.Layer, or a dict with net, "
        "input_spec, label_spec, optimizer, loss_fn",
    ),
    device: str = typer.Option("cpu", help="device profile: ipu-gc200 | ipu-bow | h200 | tpu-v5e | tpu-v5p | cpu"),
    devices: int = typer.Option(8, help="devices to spread the model over"),
    global_batch: int = typer.Option(..., "--global-batch", help="samples per optimizer step"),
    input_spec: list[str] | None = typer.Option(None, "--input-spec", help=_SPEC_OPTION_HELP),
    top: int = typer.Option(12, help="rows of the table"),
):
    """Rank the layouts that fit the model on DEVICES x DEVICE: bytes per device, predicted step time."""
    import paddle

    import paddle_xla as px

    # NOTE: built lazily, so a model larger than this machine's memory can be planned.
    with paddle.LazyGuard():
        built = load_target(target)
    parts = built if isinstance(built, dict) else {"net": built}
    specs = parts.get("input_spec") or [parse_input_spec(s) for s in input_spec or []]
    if not specs:
        raise typer.BadParameter("give --input-spec NAME:DTYPE[dims] (or return input_spec from the factory)")
    result = px.plan(
        parts["net"],
        specs,
        parts.get("label_spec", ()),
        parts.get("optimizer"),
        loss_fn=parts.get("loss_fn"),
        global_batch=global_batch,
        devices=devices,
        device=device,
    )
    typer.echo(result.table(top))
    try:
        typer.echo(f"best: {result.best}")
    except px.StrategyError as e:
        typer.echo(str(e))
        raise typer.Exit(1) from None


@app.command()
def validate(
    model: str = typer.Argument("bert", help="bert | bert-base | bert-small | bert-tiny"),
    config: str | None = typer.Option(None, help="tiny | small | base (default: from MODEL, else tiny)"),
    steps: int = typer.Option(30),
    batch: int = typer.Option(8),
    seq: int = typer.Option(64),
    lr: float = typer.Option(1e-3),
    out: str = typer.Option("validate_out", help="folder for report.json/png"),
    dropout: bool = typer.Option(
        False, "--dropout", help="the convergence run: dropout on, curves compared statistically"
    ),
    max_predictions: int = typer.Option(
        0, help="MLM head on this many masked positions per sequence (BERT's max_predictions_per_seq); 0: every token"
    ),
):
    """Train natively and with paddle_xla from the same weights and batches; report parity and speed."""
    from .validate import run

    name = config or (model.split("-", 1)[1] if "-" in model else "tiny")
    report = run(
        name, steps=steps, batch=batch, seq=seq, lr=lr, out_dir=out, dropout=dropout, max_predictions=max_predictions
    )
    ok = report.convergence["ok"] if dropout else report.max_rel_loss_diff < 1e-3
    what = "convergence" if dropout else "loss parity"
    typer.echo(f"wrote {out}/report.json and {out}/report.png; {what} {'ok' if ok else 'FAILED'}")
    raise typer.Exit(0 if ok else 1)


@app.command()
def bench(
    model: str = typer.Argument("bert-base", help="bert-base | bert-small | bert-tiny"),
    batch: int = typer.Option(8),
    seq: int = typer.Option(128),
    repeats: int = typer.Option(3, help="timed steps per configuration, after one untimed"),
    strategy: str | None = typer.Option(None, help="Strategy fields, e.g. replicas=2,precision=bf16"),
    cpu_devices: int | None = typer.Option(
        None, "--cpu-devices", help="split this CPU into N XLA devices (for replicas/stages)"
    ),
    only: str | None = typer.Option(None, help="train | infer (default: both)"),
    no_paddle: bool = typer.Option(False, "--no-paddle", help="skip the native Paddle baseline"),
    max_predictions: int = typer.Option(
        20, help="MLM head on this many masked positions per sequence (BERT's max_predictions_per_seq); 0: every token"
    ),
    out: str = typer.Option("bench_out/report.json", help="where the JSON report goes"),
):
    """Training throughput and inference latency of BERT, paddle_xla vs native Paddle's best, with MFU."""
    if cpu_devices:
        # NOTE: read once, when jax first starts a backend, so it must be set before anything imports jax.
        flags = os.environ.get("XLA_FLAGS", "")
        os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={cpu_devices}".strip()
    from ..errors import PaddleXlaError
    from . import bench as b

    name = model.lower().removeprefix("bert-").removeprefix("bert")
    if name not in ("base", "small", "tiny"):
        raise typer.BadParameter(f"{model!r}: choose bert-base, bert-small or bert-tiny", param_hint="MODEL")
    if only not in (None, *b.PARTS):
        raise typer.BadParameter(f"{only!r}: choose train or infer", param_hint="--only")
    try:
        settings = b.BenchSettings(
            config=name,
            batch=batch,
            seq=seq,
            repeats=repeats,
            strategy=b.parse_strategy(strategy),
            parts=(only,) if only else b.PARTS,
            paddle=not no_paddle,
            max_predictions=max_predictions,
        )
        import paddle_xla as px

        px.Strategy(**settings.strategy)  # NOTE: an invalid Strategy fails before any timing
    except (PaddleXlaError, TypeError) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    report = _run_bench(b, settings)
    b.write(report, out)
    _print_bench(b, report, out)


def _run_bench(b, settings):
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn()) as progress:
        task = progress.add_task("starting", total=len(b.plan(settings)) + 1)

        def on_start(part, cfg):
            progress.update(task, description=f"{part}: {cfg}", advance=0 if part == "peak" else 1)

        return b.run(settings, on_start)


def _print_bench(b, report, out):
    from rich.console import Console
    from rich.table import Table

    peak = report["matmul_peak"]
    table = Table(
        title=f"{report['model']}, batch {report['settings']['batch']}, seq {report['settings']['seq']}; "
        f"fp32 matmul peak {peak['fp32_gflops']:.0f} GFLOP/s (bf16 {peak['bf16_f32acc_gflops']:.0f})"
    )
    for col in ("part", "configuration", "time / step", "samples/s", "MFU (fp32 peak)", "vs Paddle's best"):
        table.add_column(col)
    for row in b.rows(report):
        table.add_row(*row)
    Console(width=max(Console().width, 120)).print(table)  # NOTE: a narrow terminal must not hide a figure
    typer.echo(f"wrote {out}")


@app.command()
def demo():
    """A short demonstration: check, compile, parity and timing of a BERT-style encoder."""
    from .demo import run

    run()


@app.command("export")
def export_model(
    target: str = typer.Argument(
        ...,
        help="MODULE:FACTORY returning a paddle.nn.Layer, a saved inference model's path prefix, or a "
        "PaddleFormers checkpoint folder (save_pretrained's: a language model's generator artifact)",
    ),
    output: str = typer.Option(..., "--output", "-o", help="the .pxa file to write"),
    input_spec: list[str] | None = typer.Option(None, "--input-spec", help=_SPEC_OPTION_HELP),
    precision: str | None = typer.Option(
        None, help="fp32 | bf16 | fp16 (Paddle AMP O1: half compute; default fp32, a checkpoint its own dtype)"
    ),
    max_batch_size: int | None = typer.Option(
        None, "--max-batch-size", help="checkpoint folders: the generator's rows (default 8)"
    ),
    max_model_len: int | None = typer.Option(
        None,
        "--max-model-len",
        help="checkpoint folders: the longest prompt plus completion (0: the model's, at most 4096)",
    ),
    speculative_config: str | None = typer.Option(
        None,
        "--speculative-config",
        help='checkpoint folders: speculative decoding by prompt lookup, e.g. \'{"method": "ngram", '
        '"num_speculative_tokens": 4}\'',
    ),
    platform: list[str] | None = typer.Option(
        None, "--platform", help="cpu | cuda | rocm | tpu, once each (default: cpu)"
    ),
    example_input: list[str] | None = typer.Option(
        None,
        "--example-input",
        help="NAME=FILE.npy: export for these shapes where the program's None dimensions cannot stay symbolic",
    ),
):
    """Capture a model and write it as a Paddle-free .pxa: `paddle-xla run` and `paddle-xla serve` take it."""
    import numpy as np

    import paddle_xla as px

    from ..api import checkpoint_folder as ckpt

    if os.path.isdir(target) and ckpt.is_checkpoint(target):
        dtype = {v: k for k, v in ckpt.DTYPES.items()}.get(precision or "", "auto")
        if precision is not None and dtype == "auto":
            raise typer.BadParameter(f"{precision!r}: give fp32, bf16 or fp16", param_hint="--precision")
        if input_spec or example_input:
            raise typer.BadParameter(f"{target} is a checkpoint folder: its generator's inputs are its own")
        options = ckpt.BuildOptions(
            8 if max_batch_size is None else max_batch_size, max_model_len or 0, dtype, speculative_config or ""
        )
        ckpt.export_checkpoint(target, output, options, progress=typer.echo, platforms=tuple(platform or ("cpu",)))
        typer.echo(f"wrote {output}: serve it with paddle-xla serve {os.path.dirname(output) or '.'}")
        return
    precision = precision or "fp32"
    # NOTE: a checkpoint folder's options would be dropped without a word for any other target
    given = {
        "--max-batch-size": max_batch_size,
        "--max-model-len": max_model_len,
        "--speculative-config": speculative_config,
    }
    for flag, value in given.items():
        if value is not None:
            raise TargetError(
                f"{target} is not a PaddleFormers checkpoint folder (config.json beside its weights): {flag} is for "
                "one; export a generator's options with px.export(px.Generator(...)) instead"
            )

    model, specs = _model_or_saved(target), _specs_for(target, input_spec)
    examples = None
    if example_input:
        examples = {}
        for item in example_input:
            name, sep, path = item.partition("=")
            if not sep:
                raise typer.BadParameter(f"{item!r} is not NAME=FILE.npy", param_hint="--example-input")
            examples[name] = np.load(path, allow_pickle=False)
    compiled = _captured(
        target,
        input_spec,
        lambda: (
            px.compile(model, specs, strategy=px.Strategy(precision=precision))
            if specs
            else px.compile(model, strategy=px.Strategy(precision=precision))
        ),
    )
    manifest = px.export(compiled, output, platforms=tuple(platform or ("cpu",)), example_inputs=examples)
    shapes = {p: e.get("shapes", "?") for p, e in manifest["exported"].items()}
    typer.echo(
        f"wrote {output}: {len(manifest['feeds'])} input(s), exported for {shapes} "
        f"({precision}); run it with: paddle-xla run {output} --input ..."
    )


@app.command("run")
def run_artifact(
    artifact: str = typer.Argument(..., help="a .pxa file written by px.export or paddle-xla export"),
    inputs: list[str] = typer.Option(
        ..., "--input", "-i", help="NAME=FILE.npy, or FILE.npy in the model's input order"
    ),
    output: str = typer.Option(
        "out.npy", "--output", "-o", help="FILE.npy (several outputs: FILE_0.npy, ...) or FILE.npz"
    ),
):
    """Run an exported artifact on .npy inputs. Needs JAX only, not Paddle."""
    import numpy as np

    from ..artifact import reader as pxa
    from ..errors import PaddleXlaError

    args, kwargs = [], {}
    for item in inputs:
        name, sep, path = item.rpartition("=") if "=" in item else ("", "", item)
        try:
            value = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise typer.BadParameter(f"cannot read input {path!r}: {e}", param_hint="--input") from None
        if sep:
            kwargs[name] = value
        else:
            args.append(value)
    try:
        model = pxa.load(artifact)
        if model.manifest.get("kind") == "train":
            typer.echo(
                "error: this is a train artifact; continue it from Python: "
                "s = paddle_xla.artifact.load(path); loss = s(x, y)",
                err=True,
            )
            raise typer.Exit(2)
        if not isinstance(model, pxa.Artifact):
            typer.echo("error: this is a generator artifact; run it with `paddle-xla generate`", err=True)
            raise typer.Exit(2)
        outs = model(*args, **kwargs)
    except PaddleXlaError as e:  # NOTE: a clear message, not a traceback, is the CLI's whole answer
        typer.echo(f"error: {_one_line(e)}", err=True)
        raise typer.Exit(2) from None
    outs = outs if isinstance(outs, list) else [outs]
    for path in pxa.save_outputs(output, outs, model.output_names):
        typer.echo(f"wrote {path}")
    typer.echo(f"mode: {model.mode} ({model.why})")


@app.command("generate")
def generate_text(
    artifact: str = typer.Argument(..., help="a generator .pxa written by px.export(gen, ...)"),
    prompt: str | None = typer.Option(None, "--prompt", "-p", help="text, encoded with the artifact's tokenizer"),
    ids: str | None = typer.Option(None, "--ids", help="token ids instead of text: 1,2,3"),
    max_new_tokens: int = typer.Option(20, "--max-new-tokens"),
    decode_strategy: str = typer.Option("greedy_search", "--decode-strategy", help="greedy_search | sampling"),
    top_k: int = typer.Option(50, "--top-k"),
    top_p: float = typer.Option(1.0, "--top-p"),
    temperature: float = typer.Option(1.0, "--temperature"),
    repetition_penalty: float = typer.Option(1.0, "--repetition-penalty"),
    seed: int | None = typer.Option(None, "--seed"),
):
    """Generate from a prompt with an exported language model. Needs JAX (and tokenizers), not Paddle."""
    import numpy as np

    if (prompt is None) == (ids is None):
        raise typer.BadParameter("give either --prompt TEXT or --ids 1,2,3", param_hint="--prompt")
    model = _generator(artifact)
    model.engine.name = os.path.splitext(os.path.basename(artifact))[0]  # NOTE: named in compile progress
    kw: dict[str, Any] = dict(
        max_new_tokens=max_new_tokens,
        decode_strategy=decode_strategy,
        top_k=top_k,
        top_p=top_p,
        temperature=temperature,
        repetition_penalty=repetition_penalty,
        seed=seed,
    )
    if prompt is not None:
        typer.echo(model.complete(prompt, **kw))
        return
    assert ids is not None  # NOTE: given when --prompt is not
    try:
        row = [int(t) for t in ids.split(",") if t.strip()]
    except ValueError:
        raise typer.BadParameter(f"--ids takes comma-separated integers, not {ids!r}", param_hint="--ids") from None
    out, _ = model.generate(np.asarray([row], np.int64), **kw)
    typer.echo(",".join(str(int(t)) for t in out[0]))


def _generator(artifact: str):
    """The generator artifact at `artifact`; a TargetError naming the fix where it holds another kind."""
    from ..artifact import reader as pxa
    from ..artifact.generator_reader import GeneratorArtifact

    model = pxa.load(artifact)
    if not isinstance(model, GeneratorArtifact):  # NOTE: the kind "generator" opens as one
        raise TargetError(
            f"{artifact} is a {model.manifest.get('kind', 'inference')} artifact, not a generator: "
            "export one with px.export(px.Generator(model, ...), path)"
        )
    return model


@app.command("plan-serving")
def plan_serving(
    artifact: str = typer.Argument(..., help="a generator .pxa written by px.export(gen, ...)"),
    device: str = typer.Option("h100", help="device profile: h100 | h200 | tpu-v5e | tpu-v5p | cpu (this machine)"),
    kv_cache_tokens: int | None = typer.Option(None, "--kv-cache-tokens", help="the KV cache's tokens, as serve's"),
    kv_cache_memory: float | None = typer.Option(
        None, "--kv-cache-memory", help="instead, this fraction of the memory the weights leave, as serve's"
    ),
):
    """The memory serving ARTIFACT takes on one DEVICE (weights, KV cache, working arrays) and the largest KV
    cache that fits; exit status 1 where it does not fit."""
    from ..planner.profiles import profile
    from ..planner.serving import serving_memory

    if kv_cache_tokens is not None and kv_cache_memory is not None:
        raise typer.BadParameter(
            "give --kv-cache-tokens or --kv-cache-memory, not both", param_hint="--kv-cache-memory"
        )
    prof = profile(device)
    # NOTE: the engine a server would build (batch-invariant, the default), sized but compiling nothing
    engine = _generator(artifact).paged(kv_cache_tokens=kv_cache_tokens)
    plan = serving_memory(
        engine.serving_shape(),
        engine.weight_bytes,
        prof.name,
        prof.memory_bytes,
        kv_tokens=None if kv_cache_memory is not None else engine.blocks.capacity_tokens,
        kv_cache_memory=kv_cache_memory,
    )
    typer.echo(plan.table())
    raise typer.Exit(0 if plan.fits else 1)


def _with_settings_flags(command):
    """`command(models, **flags)` with one option per serve Settings field, built from Settings.flags(), so
    each flag's default and help are written once (serve/settings.py)."""
    import inspect

    from ..serve.settings import Settings

    models = typer.Argument(..., help="a folder of .pxa files; each *.pxa is a model, named by its file stem")
    params = [inspect.Parameter("models", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=models, annotation=str)]
    for f in Settings.flags():
        option = typer.Option(f.cli_default, *f.decls, help=f.help, envvar=f.envvar, show_default=f.show_default)
        params.append(inspect.Parameter(f.param, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=f.cli_type))
    command.__signature__ = inspect.Signature(params)
    command.__annotations__ = {p.name: p.annotation for p in params}
    return command


@app.command()
@_with_settings_flags
def serve(models: str, **flags):
    """Serve every *.pxa in MODELS over HTTP: KServe v2 / Open Inference Protocol, dynamic batching,
    Prometheus /metrics. Needs JAX only, not Paddle."""
    from importlib.util import find_spec

    from ..serve import INSTALL_HINT, REQUIRED_MODULES

    missing = [m for m in REQUIRED_MODULES if find_spec(m) is None]
    if missing:
        typer.echo(f"error: paddle-xla serve needs {', '.join(missing)}: {INSTALL_HINT}", err=True)
        raise typer.Exit(2)
    from ..serve.settings import Settings

    try:
        settings = Settings.from_flags(**flags)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None
    from ..serve.server import run

    raise typer.Exit(run(models, settings))


@app.command("install")
def install_suite(suite: str = typer.Argument(..., help="the suite to bring in: paddleformers")):
    """Install one of Paddle's model suites beside paddle_xla without breaking JAX: a pinned list of packages
    with `pip install --no-deps` into this environment (a plain `pip install paddleformers` pulls numpy 1.26)."""
    from .install import UnknownSuite, install

    try:
        code = install(suite, echo=typer.echo)
    except UnknownSuite as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    raise typer.Exit(code)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def launch(
    ctx: typer.Context,
    script: str = typer.Argument(..., help="the training script; the arguments after it go to it"),
    nproc: int = typer.Option(2, "--nproc", help="processes to start on this host"),
    cpu_devices: int | None = typer.Option(None, "--cpu-devices", help="virtual CPU devices per process (CPU only)"),
    port: int | None = typer.Option(None, "--port", help="coordinator port (default: a free one)"),
):
    """Run SCRIPT in NPROC processes joined with jax.distributed, as one multi-host program."""
    from ..parallel.launch import launch as run_processes

    raise typer.Exit(run_processes(script, list(ctx.args), nproc, cpu_devices, port))
