"""`paddle-xla serve`: exported artifacts (*.pxa) behind the KServe v2 / Open Inference Protocol over HTTP.

  repository.py  scan a folder of .pxa files, load each (checksums verified), name it by file stem
  layout.py      which dimension is the batch and which may be padded to a sequence bucket
  datatypes.py   KServe datatypes (FP32, INT64, ...) <-> the artifact's dtypes
  protocol.py    request bodies (JSON and Triton's binary tensor extension) in, response bodies out
  validation.py  a request against the model's inputs: 400s that name the input and its spec
  settings.py    the flags, checked once
  metrics.py     Prometheus metrics in a registry of its own
  request_errors.py  RequestError: an HTTP status and a message
  padding.py     a batch's feeds from several requests, and each request's rows back out
  batcher.py     the dynamic batcher: one worker thread per model, bounded queue
  plan.py        batch plans: a batch of n rows as calls of the compiled batch sizes, measured at warm-up
  warmup.py      every padded shape compiled before the model says ready
  app.py         the Starlette routes: health, metadata, infer, /metrics
  http_io.py     the bearer token, the body size limit, KServe's JSON errors
  server.py      uvicorn on a socket we bind, SIGTERM draining
  llm/           generator artifacts: continuous batching, OpenAI's API, KServe's generate extension

Needs the `serve` extra (starlette, uvicorn, prometheus_client). Paddle-free: it never imports paddle."""

# NOTE: what `pip install 'paddle_xla[serve]'` adds; the CLI checks for them before importing the server.
REQUIRED_MODULES = ("starlette", "uvicorn", "prometheus_client")
INSTALL_HINT = "pip install 'paddle_xla[serve]'"
