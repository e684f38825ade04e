"""Every KServe datatype an artifact can have, through tritonclient's own request encoder and response
decoder (no server needed): what it sends is read back exactly, and what the server writes it reads
back exactly, in JSON and binary."""

import json

import ml_dtypes
import numpy as np
import pytest
import tritonclient.http as httpclient

from paddle_xla.serve import protocol
from paddle_xla.serve.datatypes import kserve_name, numpy_dtype
from paddle_xla.serve.repository import TensorMeta

DTYPES = ["bool", "int8", "uint8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64"]


def sample(dtype: str) -> np.ndarray:
    rng = np.random.default_rng(0)
    if dtype == "bool":
        return rng.integers(0, 2, (2, 3)).astype(bool)
    if dtype in ("float16", "bfloat16", "float32", "float64"):
        return rng.standard_normal((2, 3)).astype(numpy_dtype(dtype))
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, -1000), min(info.max, 1000), (2, 3)).astype(dtype)


@pytest.mark.parametrize("binary", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_tritonclient_round_trip(dtype, binary):
    array, meta = sample(dtype), TensorMeta("t", kserve_name(dtype), (-1, 3), numpy_dtype(dtype))
    if dtype == "bfloat16" and not binary:  # NOTE: tritonclient sends BF16 only as binary; JSON by hand
        body, json_size = (
            json.dumps(
                {
                    "inputs": [
                        {
                            "name": "t",
                            "shape": [2, 3],
                            "datatype": "BF16",
                            "data": array.astype("float32").ravel().tolist(),
                        }
                    ]
                }
            ).encode(),
            None,
        )
    else:
        inp = httpclient.InferInput("t", list(array.shape), meta.datatype)
        inp.set_data_from_numpy(array, binary_data=binary)
        body, json_size = httpclient.InferenceServerClient.generate_request_body([inp])
    request = protocol.parse(body, None if json_size is None else str(json_size))
    got = protocol.read_tensors(request, {"t": meta})["t"]
    assert got.dtype == meta.dtype and np.array_equal(got, array)

    body, header_length = protocol.encode("m", "7", [(meta, array, binary)])
    result = httpclient.InferResult.from_response_body(body, header_length=header_length)
    back = result.as_numpy("t")
    assert result.get_response()["id"] == "7"
    if dtype == "bfloat16":
        back = back.astype(ml_dtypes.bfloat16)  # NOTE: tritonclient may widen BF16 to float32 on the way out
    assert back.shape == array.shape and np.array_equal(back.astype(array.dtype), array)


def test_complex_models_are_refused_with_a_reason():
    from paddle_xla.errors import ModelLoadError

    with pytest.raises(ModelLoadError, match="complex64.*no KServe v2 datatype"):
        kserve_name("complex64")
