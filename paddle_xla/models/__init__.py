"""The model library: plain paddle.nn code a user could have written (BERT, GPT, Llama, mobile CNNs, CTR,
speech, vision), with locally made data, for tests, benchmarks and `paddle-xla demo`. Imports paddle."""
