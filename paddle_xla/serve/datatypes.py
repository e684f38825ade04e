"""KServe v2 datatypes <-> the dtypes an artifact records (Paddle's names: float32, int64, ...)."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from ..errors import ModelLoadError

_KSERVE = {
    "bool": "BOOL",
    "uint8": "UINT8",
    "uint16": "UINT16",
    "uint32": "UINT32",
    "uint64": "UINT64",
    "int8": "INT8",
    "int16": "INT16",
    "int32": "INT32",
    "int64": "INT64",
    "float16": "FP16",
    "bfloat16": "BF16",
    "float32": "FP32",
    "float64": "FP64",
}

# NOTE: what np.asarray makes of JSON values that a tensor of this kind may take: JSON integers for a
# float tensor are fine, JSON floats for an integer tensor are not (they would be truncated silently).
_JSON_KINDS = {"b": "b", "u": "iu", "i": "iu", "f": "iuf", "V": "iuf"}  # V: ml_dtypes' bfloat16


def kserve_name(dtype: str) -> str:
    """'float32' -> 'FP32'. A dtype KServe has no name for (complex64) cannot be served."""
    try:
        return _KSERVE[dtype]
    except KeyError:
        raise ModelLoadError(
            f"dtype {dtype!r} has no KServe v2 datatype, so a tensor of it cannot be "
            f"served; serve models whose inputs and outputs are {sorted(_KSERVE)}."
        ) from None


def numpy_dtype(dtype: str) -> np.dtype:
    return np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)


def json_kinds(dtype: np.dtype) -> str:
    """The np.asarray kinds of JSON data a tensor of `dtype` accepts."""
    return _JSON_KINDS.get(dtype.kind, "")


def to_json_list(array: np.ndarray) -> list:
    """A tensor's values, flat in row-major order, as JSON-ready Python numbers; a non-finite float
    as the string "NaN", "Infinity" or "-Infinity" (protocol.py says why)."""
    if array.dtype == ml_dtypes.bfloat16:
        array = array.astype(np.float32)  # NOTE: bfloat16 scalars are not JSON-serializable as they are
    values = array.ravel().tolist()
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        values = [
            v if math.isfinite(v) else _NON_FINITE[int(math.copysign(1, v)) if math.isinf(v) else 0] for v in values
        ]
    return values


_NON_FINITE = {0: "NaN", 1: "Infinity", -1: "-Infinity"}
