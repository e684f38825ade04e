"""A request against the model it names, before any data is read: each mistake is a 400 that names
the input and the spec it must meet (name, datatype, shape with -1 for a free dimension)."""

from __future__ import annotations

from collections import Counter

from ..runtime.feeds import shape_problem
from .protocol import InferRequest
from .repository import ServedModel, TensorMeta
from .request_errors import bad_request


def check_inputs(request: InferRequest, model: ServedModel, max_batch_size: int) -> None:
    names = [item["name"] for item in request.inputs]
    twice = sorted(n for n, k in Counter(names).items() if k > 1)
    unknown = [n for n in names if n not in model.inputs]
    missing = [n for n in model.inputs if n not in names]
    if twice:
        raise bad_request(f"Input(s) {twice} are given twice; send each of {_specs(model)} once.")
    if unknown or missing:
        what = "; ".join(
            filter(
                None,
                [
                    f"unknown input(s) {unknown}" if unknown else None,
                    f"missing input(s) {missing}" if missing else None,
                ],
            )
        )
        raise bad_request(f"Model {model.name!r}: {what}. Its inputs are {_specs(model)}.")
    shapes = {}
    for item in request.inputs:
        meta = model.inputs[item["name"]]
        _check_one(meta, item["datatype"], item["shape"])
        shapes[meta.name] = item["shape"]
    _check_shared_dims(model, shapes)
    rows = shapes[next(iter(shapes))][0] if model.layout.batch else 0
    if rows > max_batch_size:
        raise bad_request(
            f"Model {model.name!r}: the request has {rows} rows, more than the server's "
            f"--max-batch-size {max_batch_size}. Split it into requests of at most {max_batch_size} rows."
        )


def requested_outputs(request: InferRequest, model: ServedModel) -> list[tuple[TensorMeta, bool]]:
    """The outputs to send, in the order asked (all of them when none are), each with whether as binary."""
    if request.outputs is None:
        return [(meta, request.binary_output) for meta in model.outputs.values()]
    unknown = [name for name, _ in request.outputs if name not in model.outputs]
    if unknown:
        raise bad_request(
            f"Model {model.name!r} has no output(s) {unknown}; its outputs are "
            f"{[meta.describe() for meta in model.outputs.values()]}."
        )
    return [
        (model.outputs[name], request.binary_output if binary is None else binary is True)
        for name, binary in request.outputs
    ]


def _check_one(meta: TensorMeta, datatype: str, shape: list[int]) -> None:
    if datatype != meta.datatype:
        raise bad_request(f"Input {meta.name!r} has datatype {datatype}, but the model expects {meta.describe()}.")
    problem = shape_problem(meta.name, shape, meta.shape, meta.describe())
    if problem:
        raise bad_request(problem)
    if 0 in shape:
        raise bad_request(
            f"Input {meta.name!r} has shape {shape}; every dimension must be at least 1: {meta.describe()}."
        )


def _check_shared_dims(model: ServedModel, shapes: dict[str, list[int]]) -> None:
    """Free dimensions the exporter made one symbol (the batch; a sequence length shared by
    input_ids and attention_mask) must have one size in a request."""
    layout = model.layout
    seen: dict[str, tuple[str, int, int]] = {}
    for name, dims in layout.inputs.items():
        for axis, dim in enumerate(dims):
            if not isinstance(dim, str) or not (layout.symbolic or dim == layout.batch):
                continue
            first = seen.setdefault(dim, (name, axis, shapes[name][axis]))
            if first[2] != shapes[name][axis]:
                raise bad_request(
                    f"Inputs {first[0]!r} and {name!r} must have the same size in dimension {first[1]} "
                    f"and {axis} (both the model's free dimension {dim}), but have {first[2]} and "
                    f"{shapes[name][axis]}: {model.inputs[first[0]].describe()}, "
                    f"{model.inputs[name].describe()}."
                )


def _specs(model: ServedModel) -> str:
    return ", ".join(meta.describe() for meta in model.inputs.values())
