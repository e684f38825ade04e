"""KServe v2 inference bodies: JSON tensors, and Triton's binary tensor extension, both ways.

A request body is a JSON header, then (binary extension) the raw bytes of the inputs that say
`parameters.binary_data_size`, in the order the header lists them; the HTTP header
Inference-Header-Content-Length says where the JSON ends. A response is built the same way for the
outputs asked with `parameters.binary_data: true` (or all, with `parameters.binary_data_output`).
Raw bytes are little-endian, as on every platform XLA runs on, so NumPy reads them in place."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from typing import Any

import ml_dtypes
import numpy as np

from .datatypes import json_kinds, to_json_list
from .repository import TensorMeta
from .request_errors import bad_request

HEADER_LENGTH = "Inference-Header-Content-Length"


@dataclasses.dataclass
class InferRequest:
    id: str | None
    inputs: list[dict]  # the header's input objects, well-formed
    outputs: list[tuple[str, bool | None]] | None  # (name, as binary if said) asked for; None: all
    binary_output: bool  # parameters.binary_data_output
    timeout_us: int  # 0: none asked
    binary: memoryview  # what follows the JSON header


def parse(body: bytes, header_length: str | None) -> InferRequest:
    """The request's JSON header, checked for form (not yet against the model), and its binary part."""
    header, binary = _split(body, header_length)
    try:
        request = json.loads(bytes(header), parse_constant=_no_constant)
    except _NonFinite as e:
        raise bad_request(
            f"The request body holds the literal {e}, which is not JSON (RFC 8259 has no NaN or "
            "Infinity); send finite numbers, or the tensor in binary (parameters.binary_data_size)."
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:  # NOTE: RecursionError: [[[[...]]]]
        raise bad_request(
            f"The request body is not valid JSON ({e}). Send a KServe v2 inference request: "
            '{"inputs": [{"name": ..., "shape": [...], "datatype": ..., "data": [...]}]}.'
        ) from None
    except ValueError as e:  # NOTE: an integer of more digits than Python converts (sys.int_info)
        raise bad_request(
            f"The request body holds a number this server cannot read ({e}); integers must fit "
            "their datatype (INT64: at most 19 digits)."
        ) from None
    if not isinstance(request, dict):
        raise bad_request('The request body must be a JSON object with an "inputs" list.')
    params = _object(request.get("parameters", {}), 'the request\'s "parameters"')
    if "sequence_id" in params:
        raise bad_request("Sequence batching (parameters.sequence_id) is not supported; send requests without it.")
    request_id = request.get("id")
    if request_id is not None and not isinstance(request_id, str):
        raise bad_request(f'The request "id" must be a string, not {json.dumps(request_id)}.')
    return InferRequest(
        request_id,
        _inputs(request.get("inputs")),
        _outputs(request.get("outputs")),
        params.get("binary_data_output") is True,
        _timeout(params.get("timeout", 0)),
        binary,
    )


def read_tensors(request: InferRequest, metas: Mapping[str, TensorMeta]) -> dict[str, np.ndarray]:
    """The input arrays, each in its model input's dtype. Call after validation.check_inputs."""
    arrays, offset = {}, 0
    for item in request.inputs:
        meta, shape = metas[item["name"]], tuple(item["shape"])
        size = item.get("parameters", {}).get("binary_data_size")
        if size is None:
            arrays[meta.name] = _json_tensor(item["data"], meta, shape)
            continue
        arrays[meta.name] = _binary_tensor(request.binary[offset : offset + size], meta, shape, size)
        offset += size
    if offset != len(request.binary):
        raise bad_request(
            f"The binary part of the body is {len(request.binary)} bytes, but the inputs' "
            f"binary_data_size add up to {offset}. Send exactly the bytes the header announces."
        )
    return arrays


def encode(
    model: str, request_id: str | None, outputs: list[tuple[TensorMeta, np.ndarray, bool]]
) -> tuple[bytes, int | None]:
    """(body, JSON header length or None when nothing is binary) of an inference response."""
    items, blobs = [], []
    for meta, array, binary in outputs:
        item: dict[str, Any] = {"name": meta.name, "datatype": meta.datatype, "shape": list(array.shape)}
        if binary:
            blob = np.ascontiguousarray(array, dtype=meta.dtype).tobytes()
            item["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        else:
            item["data"] = to_json_list(np.asarray(array, dtype=meta.dtype))
            item.update(_non_finite_note(array))
        items.append(item)
    response = {
        "model_name": model,
        "model_version": "1",
        **({"id": request_id} if request_id is not None else {}),
        "outputs": items,
    }
    # NOTE: allow_nan=False: a bare NaN would make the body unreadable to a strict JSON parser
    header = json.dumps(response, separators=(",", ":"), allow_nan=False).encode()
    return (header + b"".join(blobs), len(header)) if blobs else (header, None)


# ---- request form ----------------------------------------------------------------------------------
def _split(body: bytes, header_length: str | None) -> tuple[memoryview, memoryview]:
    """(JSON header, binary part), as views: a large tensor's bytes are not copied on the way to NumPy."""
    view = memoryview(body)
    if header_length is None:
        return view, view[len(view) :]
    if not header_length.strip().isdigit() or int(header_length) > len(view):
        raise bad_request(
            f"{HEADER_LENGTH} is {header_length!r}, but the body is {len(body)} bytes; it must be "
            "the length of the JSON header at the start of the body."
        )
    return view[: int(header_length)], view[int(header_length) :]


def _object(value, what: str) -> dict:
    if not isinstance(value, dict):
        raise bad_request(f"{what} must be a JSON object, not {json.dumps(value)[:80]}.")
    return value


def _inputs(inputs) -> list[dict]:
    if not isinstance(inputs, list) or not inputs:
        raise bad_request('The request needs an "inputs" list with one object per model input.')
    for i, item in enumerate(inputs):
        _object(item, f"inputs[{i}]")
        name = item.get("name")
        if not isinstance(name, str):
            raise bad_request(f'inputs[{i}] needs a "name" (a string).')
        shape = item.get("shape")
        if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
            raise bad_request(f'Input {name!r} needs a "shape": a list of whole numbers, not {json.dumps(shape)}.')
        if not isinstance(item.get("datatype"), str):
            raise bad_request(f'Input {name!r} needs a "datatype" such as "FP32" or "INT64".')
        size = _object(item.get("parameters", {}), f'the "parameters" of input {name!r}').get("binary_data_size")
        if "shared_memory_region" in item.get("parameters", {}):
            raise bad_request(
                f"Input {name!r} asks for shared memory, which this server does not support; send its data in the body."
            )
        if (size is None) == ("data" not in item):
            raise bad_request(f'Input {name!r} needs exactly one of "data" or parameters.binary_data_size.')
        if size is not None and (type(size) is not int or size < 0):
            raise bad_request(f"Input {name!r} has binary_data_size {json.dumps(size)}; it must be a byte count.")
    return inputs


def _outputs(outputs) -> list[tuple[str, bool | None]] | None:
    if outputs is None:
        return None
    if not isinstance(outputs, list):
        raise bad_request('"outputs" must be a list of {"name": ...} objects.')
    wanted = []
    for i, item in enumerate(outputs):
        name = _object(item, f"outputs[{i}]").get("name")
        params = _object(item.get("parameters", {}), f'the "parameters" of outputs[{i}]')
        if not isinstance(name, str):
            raise bad_request(f'outputs[{i}] needs a "name" (a string).')
        if params.get("classification"):
            raise bad_request(f"Output {name!r} asks for classification, which this server does not support.")
        wanted.append((name, params.get("binary_data")))
    return wanted


def _timeout(value) -> int:
    if type(value) is not int or value < 0:
        raise bad_request(f"parameters.timeout is {json.dumps(value)}; it must be whole microseconds (0: none).")
    return value


# ---- tensor data -----------------------------------------------------------------------------------
def _json_tensor(data, meta: TensorMeta, shape: tuple[int, ...]) -> np.ndarray:
    count = math.prod(shape)
    try:
        values = np.asarray(data)
    except ValueError:  # NOTE: ragged nested lists
        raise bad_request(
            f"The data of input {meta.name!r} is not a flat (or evenly nested) list of numbers."
        ) from None
    if values.size != count:
        raise bad_request(
            f'Input {meta.name!r} has {values.size} values in "data", but shape {list(shape)} '
            f"needs {count}. Send the values flat, in row-major order."
        )
    if count and values.dtype.kind not in json_kinds(meta.dtype):
        raise bad_request(
            f"The data of input {meta.name!r} holds {_kind_name(values)} values, which "
            f"{meta.datatype} cannot take: {meta.describe()}."
        )
    if count and values.dtype.kind == "f" and not np.isfinite(values).all():
        raise bad_request(
            f"The data of input {meta.name!r} has a number too large for JSON's doubles "
            f"(read as infinity); send finite values in {meta.datatype}'s range."
        )
    if count and meta.dtype.kind in "fV" and values.dtype.kind == "f":
        top = float(ml_dtypes.finfo(meta.dtype).max)  # NOTE: numpy's finfo knows no bfloat16
        if np.abs(values).max() > top:
            raise bad_request(
                f"The data of input {meta.name!r} has values outside {meta.datatype}'s range "
                f"[-{top:.6g}, {top:.6g}]: they would become infinity. Send values that fit, "
                "or a wider datatype if the model takes one."
            )
    if count and meta.dtype.kind in "iu":
        info = np.iinfo(meta.dtype)
        if values.min() < info.min or values.max() > info.max:
            raise bad_request(
                f"The data of input {meta.name!r} has values outside {meta.datatype}'s range [{info.min}, {info.max}]."
            )
    return values.astype(meta.dtype).reshape(shape)


def _binary_tensor(blob: memoryview, meta: TensorMeta, shape: tuple[int, ...], size: int) -> np.ndarray:
    want = math.prod(shape) * meta.dtype.itemsize
    if size != want:
        raise bad_request(
            f"Input {meta.name!r} has binary_data_size {size}, but shape {list(shape)} of "
            f"{meta.datatype} is {want} bytes."
        )
    if len(blob) != size:
        raise bad_request(
            f"The body ends {size - len(blob)} bytes short of input {meta.name!r}'s binary_data_size {size}."
        )
    array = np.frombuffer(blob, dtype=meta.dtype).reshape(shape)
    if meta.dtype == np.bool_ and array.size and array.view(np.uint8).max() > 1:
        raise bad_request(f"Input {meta.name!r} is BOOL, but its bytes hold values other than 0 and 1.")
    return array


class _NonFinite(ValueError):
    pass


def _no_constant(literal: str):
    raise _NonFinite(literal)


# NOTE: strict JSON has no NaN or Infinity. Non-finite output values are written as the strings "NaN",
# "Infinity" and "-Infinity", as the proto3 JSON mapping of KServe's gRPC protocol writes floats;
# the output says so in parameters.non_finite, so a client can tell them from data.
def _non_finite_note(array: np.ndarray) -> dict:
    values = np.asarray(array)
    if values.dtype.kind not in "fV" or np.isfinite(values.astype(np.float32)).all():
        return {}
    return {"parameters": {"non_finite": "NaN, Infinity and -Infinity are sent as JSON strings"}}


def _kind_name(values: np.ndarray) -> str:
    return {
        "b": "boolean",
        "i": "integer",
        "u": "integer",
        "f": "floating-point",
        "U": "string",
        "O": "mixed or out-of-range",
    }.get(values.dtype.kind, values.dtype.name)
