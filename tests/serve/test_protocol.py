"""KServe v2 through tritonclient.http, unchanged: health, metadata, ready, Triton's config, and
inference in JSON and binary, each answer equal to the artifact's own output."""

import json
import subprocess
import sys

import numpy as np
import pytest
import tritonclient.http as httpclient

from .harness import assert_same, request, rows


@pytest.fixture(scope="module")
def client(main_server):
    c = httpclient.InferenceServerClient(main_server.url)
    yield c
    c.close()


def twoheads_inputs(x, y, binary):
    inputs = [httpclient.InferInput("x", list(x.shape), "FP32"), httpclient.InferInput("y", list(y.shape), "FP32")]
    inputs[0].set_data_from_numpy(x, binary_data=binary)
    inputs[1].set_data_from_numpy(y, binary_data=binary)
    return inputs


def test_health_and_server_metadata(client):
    assert client.is_server_live() and client.is_server_ready()
    meta = client.get_server_metadata()
    assert meta["name"] == "paddle_xla" and "binary_tensor_data" in meta["extensions"]


def test_model_metadata_and_ready(client, artifacts):
    for name, art in artifacts.items():
        assert client.is_model_ready(name) and client.is_model_ready(name, "1")
        meta = client.get_model_metadata(name)
        assert meta["name"] == name and meta["versions"] == ["1"]
        assert [(t["name"], t["shape"]) for t in meta["inputs"]] == [(f.name, list(f.shape)) for f in art.feeds_spec]
        assert [(t["name"], t["shape"]) for t in meta["outputs"]] == [(f.name, list(f.shape)) for f in art.fetches_spec]
    twoheads, bert = client.get_model_metadata("twoheads"), client.get_model_metadata("bert")
    assert twoheads["inputs"][0] == {"name": "x", "datatype": "FP32", "shape": [-1, 8]}
    assert {t["datatype"] for t in bert["inputs"]} == {"INT64"} and bert["inputs"][0]["shape"] == [-1, -1]
    assert not client.is_model_ready("nope") and not client.is_model_ready("twoheads", "2")


def test_model_config(client):
    batched, fixed = client.get_model_config("twoheads"), client.get_model_config("fixed")
    assert batched["max_batch_size"] == 16 and batched["input"][0]["dims"] == [8]
    assert batched["dynamic_batching"]["preferred_batch_size"] == [1, 2, 4, 8, 16]
    assert fixed["max_batch_size"] == 0 and "dynamic_batching" not in fixed and fixed["input"][0]["dims"] == [2, 8]


@pytest.mark.parametrize("binary", [False, True])
def test_infer_matches_artifact(client, artifacts, binary):
    x, y = rows(3, seed=1)
    wanted = [httpclient.InferRequestedOutput(n, binary_data=binary) for n in ("output_0", "output_1")]
    result = client.infer("twoheads", twoheads_inputs(x, y, binary), outputs=wanted, request_id="req-7")
    response = result.get_response()
    assert response["id"] == "req-7" and response["model_name"] == "twoheads"
    for out in response["outputs"]:
        assert ("data" in out) != binary and ("binary_data_size" in out.get("parameters", {})) == binary
    want = artifacts["twoheads"](x, y)
    assert_same(result.as_numpy("output_0"), want[0])
    assert_same(result.as_numpy("output_1"), want[1])


def test_outputs_selected_by_name(client, artifacts):
    x, y = rows(2, seed=2)
    result = client.infer(
        "twoheads",
        twoheads_inputs(x, y, True),
        outputs=[httpclient.InferRequestedOutput("output_1", binary_data=False)],
    )
    assert [o["name"] for o in result.get_response()["outputs"]] == ["output_1"]
    assert result.as_numpy("output_0") is None
    assert_same(result.as_numpy("output_1"), artifacts["twoheads"](x, y)[1])
    everything = client.infer("twoheads", twoheads_inputs(x, y, False))  # NOTE: no outputs named: all, binary
    assert [o["name"] for o in everything.get_response()["outputs"]] == ["output_0", "output_1"]


def test_model_without_batch_dimension_served_unbatched(client, artifacts):
    x = rows(2, seed=3)[0]
    inp = httpclient.InferInput("x", [2, 8], "FP32")
    inp.set_data_from_numpy(x)
    assert_same(client.infer("fixed", [inp]).as_numpy("output_0"), artifacts["fixed"](x))


def test_artifact_without_executable_here_is_relowered_and_batched(client, artifacts):
    assert artifacts["cuda_only"].mode == "relowered"
    assert client.get_model_config("cuda_only")["max_batch_size"] == 16
    x, y = rows(3, seed=5)
    result = client.infer("cuda_only", twoheads_inputs(x, y, True))
    want = artifacts["cuda_only"](x, y)
    assert_same(result.as_numpy("output_0"), want[0])
    assert_same(result.as_numpy("output_1"), want[1])


def test_int64_inputs_in_plain_json(main_server, artifacts):
    rng = np.random.default_rng(4)
    ids, types = rng.integers(0, 100, (2, 16)), rng.integers(0, 2, (2, 16))
    mask = np.ones((2, 16), "int64")
    payload = {
        "inputs": [
            {"name": n, "shape": [2, 16], "datatype": "INT64", "data": a.tolist()}  # NOTE: nested lists
            for n, a in (("input_ids", ids), ("token_type_ids", types), ("attention_mask", mask))
        ],
        "outputs": [{"name": "output_1"}],
    }
    status, headers, body = request(main_server.port, "POST", "/v2/models/bert/infer", json.dumps(payload).encode())
    assert status == 200 and headers["content-type"] == "application/json", body
    out = json.loads(body)["outputs"][0]
    want = artifacts["bert"](ids.astype("int64"), types.astype("int64"), mask)[1]
    assert out["shape"] == [2, 32] and out["datatype"] == "FP32"
    np.testing.assert_allclose(np.array(out["data"], "float32").reshape(2, 32), want, rtol=1e-5, atol=1e-5)


def test_server_never_imports_paddle():
    code = (
        "import sys, paddle_xla.cli, paddle_xla.serve.server; "
        "sys.exit(any(m == 'paddle' or m.startswith('paddle.') for m in sys.modules))"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_cli_names_the_missing_extra(monkeypatch):
    from typer.testing import CliRunner

    from paddle_xla.cli.main import app

    monkeypatch.setitem(sys.modules, "uvicorn", None)  # NOTE: find_spec then reports it missing
    result = CliRunner().invoke(app, ["serve", "models"])
    assert result.exit_code == 2 and "pip install 'paddle_xla[serve]'" in result.output


def test_cli_checks_flags():
    from typer.testing import CliRunner

    from paddle_xla.cli.main import app

    result = CliRunner().invoke(app, ["serve", "models", "--max-batch-size", "8", "--preferred-batch-sizes", "4,32"])
    assert result.exit_code == 2 and "--preferred-batch-sizes [32] must lie in 1..8" in result.output


def test_non_finite_outputs_are_strict_json():
    """NaN and infinities go out as the strings "NaN", "Infinity", "-Infinity" (proto3's JSON mapping),
    marked in the output's parameters, so a strict parser reads the body; finite outputs are unmarked."""
    from paddle_xla.serve.protocol import encode
    from paddle_xla.serve.repository import TensorMeta

    meta = TensorMeta("out", "FP32", (-1, 2), np.dtype("float32"))
    arr = np.array([[np.nan, np.inf], [-np.inf, 1.5]], np.float32)
    body, header_len = encode("m", None, [(meta, arr, False), (meta, np.ones((1, 2), np.float32), False)])

    def refuse(literal):
        raise AssertionError(f"bare {literal} in the body")

    out = json.loads(body, parse_constant=refuse)["outputs"]
    assert header_len is None
    assert out[0]["data"] == ["NaN", "Infinity", "-Infinity", 1.5] and "non_finite" in out[0]["parameters"]
    assert out[1]["data"] == [1.0, 1.0] and "parameters" not in out[1]
