"""The processes benchmarks/serve.py starts, one job each:

    serve_workers.py prepare JOB.json    (Paddle) build the model, export the .pxa, paddle.jit.save it, draw the inputs
    serve_workers.py offline JOB.json    (Paddle-free) the artifact's own answers per input, and its batch timings
    serve_workers.py paddle JOB.json     (Paddle) Paddle Inference behind the same HTTP stack, one request per call

A job file says which model, where its files are, and (paddle) which port. Results go to JSON files
the job names. Paddle is imported only by `prepare` and `paddle`, so the offline timing runs in a
process as light as the server's."""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))


# ---- prepare (Paddle) ----------------------------------------------------------------------------


def build(name: str, settings: dict):
    """(net in eval mode, input specs with a free batch dimension, `pool` distinct inputs)."""
    import paddle
    from paddle.static import InputSpec

    paddle.seed(0)
    rng = np.random.default_rng(0)
    pool = settings["pool"]
    if name == "bert":
        from paddle_xla.models.bert import BertConfig, BertForSequenceClassification, BertModel

        cfg = BertConfig.named(settings["config"])
        net, seq = BertForSequenceClassification(cfg), settings["seq"]
        ids = rng.integers(1, cfg.vocab_size, (pool, seq)).astype("int64")
        types = (np.arange(seq)[None, :] >= seq // 2).astype("int64").repeat(pool, 0)
        specs, inputs = BertModel.input_spec(seq), [ids, types]
    else:
        net, size = getattr(paddle.vision.models, settings.get("arch", name))(), settings["size"]
        specs = [InputSpec([None, 3, size, size], "float32", "x")]
        inputs = [rng.standard_normal((pool, 3, size, size)).astype("float32")]
    net.eval()
    return net, specs, inputs


def prepare(job: dict) -> dict:
    import paddle

    import paddle_xla as px
    from paddle_xla.artifact.writer import export

    net, specs, inputs = build(job["model"], job["settings"])
    strategy = px.Strategy(precision="bf16") if job["settings"]["bf16"] else None
    start = time.perf_counter()
    export(px.compile(net, specs, strategy=strategy), job["artifact"])
    export_s = time.perf_counter() - start
    paddle.jit.save(net, job["paddle_prefix"], input_spec=specs)
    np.savez(job["pool"], *inputs)
    return {"export_s": export_s, "input_names": [s.name for s in specs]}


# ---- offline (Paddle-free) -----------------------------------------------------------------------


def load_pool(path: str) -> list[np.ndarray]:
    with np.load(path) as f:
        return [f[f"arr_{i}"] for i in range(len(f.files))]


def rows_of(pool: list[np.ndarray], batch: int) -> list[np.ndarray]:
    """`batch` rows of every input, cycling through the pool."""
    index = np.arange(batch) % len(pool[0])
    return [x[index] for x in pool]


def offline(job: dict) -> dict:
    """The artifact called in-process, as the server calls it (artifact.run, then NumPy)."""
    from paddle_xla.artifact import reader as pxa

    model = pxa.load(job["artifact"])
    pool = load_pool(job["pool"])
    answers = [[np.asarray(o) for o in model.run(*[x[i : i + 1] for x in pool])] for i in range(len(pool[0]))]
    np.savez(job["answers"], *[np.concatenate([a[k] for a in answers]) for k in range(len(answers[0]))])
    timings = {}
    for batch in job["batches"]:
        feeds = rows_of(pool, batch)
        samples = []
        for k in range(job["repeats"] + 1):  # NOTE: the first call compiles (or reads the cache)
            start = time.perf_counter()
            [np.asarray(o) for o in model.run(*feeds)]
            if k:
                samples.append(time.perf_counter() - start)
        median = statistics.median(samples)
        timings[str(batch)] = {
            "median_ms": median * 1e3,
            "min_ms": min(samples) * 1e3,
            "rows_per_s": batch / median,
            "repeats": len(samples),
        }
    return {"output_names": list(model.output_names), "batches": timings}


# ---- Paddle Inference behind the same HTTP stack ------------------------------------------------


def paddle_predictor(prefix: str, threads: int):
    import paddle.inference as pi

    model_file = next(prefix + ext for ext in (".json", ".pdmodel") if os.path.exists(prefix + ext))
    config = pi.Config(model_file, prefix + ".pdiparams")
    config.enable_mkldnn()
    config.set_cpu_math_library_num_threads(threads)
    config.switch_ir_optim(True)
    config.disable_glog_info()
    return pi.create_predictor(config)


class PaddleModel:
    """One predictor, one call at a time (a predictor is not thread-safe): what a Paddle user
    serving with Paddle Inference writes."""

    def __init__(self, prefix: str, input_names: list[str], output_names: list[str], threads: int):
        import threading

        self.predictor = paddle_predictor(prefix, threads)
        self.inputs = [self.predictor.get_input_handle(n) for n in input_names]
        self.outputs = [self.predictor.get_output_handle(n) for n in self.predictor.get_output_names()]
        self.input_names, self.output_names = input_names, output_names
        self.lock = threading.Lock()

    def __call__(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        with self.lock:
            for handle, name in zip(self.inputs, self.input_names):
                handle.copy_from_cpu(arrays[name])
            self.predictor.run()
            return {name: h.copy_to_cpu() for name, h in zip(self.output_names, self.outputs)}


def paddle_service(job: dict) -> None:
    """KServe v2 infer over Starlette + uvicorn (the server's own request parsing and response
    encoding), each request one predictor call. Prints 'listening on PORT' when it takes requests."""
    import asyncio

    import uvicorn
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    from paddle_xla.serve import protocol
    from paddle_xla.serve.datatypes import kserve_name
    from paddle_xla.serve.http_io import error_response
    from paddle_xla.serve.repository import TensorMeta
    from paddle_xla.serve.request_errors import RequestError
    from paddle_xla.serve.server import bind

    pool = load_pool(job["pool"])
    model = PaddleModel(job["paddle_prefix"], job["input_names"], job["output_names"], job["threads"])
    answers = [model({n: x[i : i + 1] for n, x in zip(job["input_names"], pool)}) for i in range(len(pool[0]))]
    np.savez(job["answers"], *[np.concatenate([a[n] for a in answers]) for n in job["output_names"]])
    start = time.perf_counter()
    model({n: x[:1] for n, x in zip(job["input_names"], pool)})
    single_s = time.perf_counter() - start

    def meta(name, array):
        return TensorMeta(name, kserve_name(str(array.dtype)), (-1, *array.shape[1:]), array.dtype)

    in_metas = {n: meta(n, x) for n, x in zip(job["input_names"], pool)}
    out_metas = {n: meta(n, a) for n, a in answers[0].items()}

    async def infer(request):
        try:
            parsed = protocol.parse(await request.body(), request.headers.get(protocol.HEADER_LENGTH))
            outputs = await asyncio.to_thread(model, protocol.read_tensors(parsed, in_metas))
        except RequestError as e:
            return error_response(e)
        wanted = [
            (out_metas[n], outputs[n], binary if binary is not None else parsed.binary_output)
            for n, binary in (parsed.outputs or [(n, None) for n in job["output_names"]])
        ]
        body, header_length = protocol.encode(request.path_params["name"], parsed.id, wanted)
        headers = {protocol.HEADER_LENGTH: str(header_length)} if header_length is not None else {}
        return Response(body, headers=headers, media_type="application/octet-stream" if headers else "application/json")

    async def ready(request):
        return JSONResponse({"ready": True})

    app = Starlette(
        routes=[Route("/v2/health/ready", ready), Route("/v2/models/{name}/infer", infer, methods=["POST"])]
    )
    sock = bind("127.0.0.1", 0)
    print(f"single call {single_s * 1e3:.3f} ms", flush=True)
    print(f"listening on {sock.getsockname()[1]}", flush=True)
    server = uvicorn.Server(uvicorn.Config(app, lifespan="off", log_level="warning", access_log=False))
    asyncio.run(server.serve(sockets=[sock]))


def main(argv: list[str]) -> int:
    kind, job_path = argv
    with open(job_path, encoding="utf-8") as f:
        job = json.load(f)
    if kind == "paddle":
        paddle_service(job)
        return 0
    result = {"prepare": prepare, "offline": offline}[kind](job)
    with open(job["result"], "w", encoding="utf-8") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
