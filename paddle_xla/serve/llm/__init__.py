"""Language models behind `paddle-xla serve`: a generator artifact's continuous batching, OpenAI's API and
KServe's generate extension.

  scheduler.py  one thread per model: cancels, prefills waiting requests into free rows, runs decode chunks
  requests.py   OpenAI request bodies read and checked, each wrong field named in a 400
  chat.py       chat messages to a prompt with the model's template, in Jinja2's sandbox
  text.py       token ids to streamed text: incremental detokenization and `stop` strings
  logprobs.py   the engine's token scores as OpenAI's `logprobs` objects (completions' and chat's layouts)
  replies.py    OpenAI's response objects for n choices (best_of), whole or streamed
  routes.py     the Starlette routes: /v1/models(/{id}), /v1/completions, /v1/chat/completions, generate(_stream)

Paddle-free."""
