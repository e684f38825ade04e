"""The public face: the modules behind `px.compile`, `px.train_step`, `px.Model`, `px.plan` and
`px.Generator`. Each is an edge module: it imports paddle to read the user's Layer, optimizer or
PaddleFormers model, then hands a Graph to the Paddle-free packages below it.

| module         | public names                                              |
|----------------|-----------------------------------------------------------|
| inference.py   | compile, check, load_inference_model, XlaModel            |
| training.py    | train_step, TrainStep                                     |
| hapi.py        | Model (paddle.Model's prepare / fit / evaluate / predict) |
| planning.py    | plan                                                      |
| generator.py   | Generator, generate                                       |

`paddle_xla/__init__.py` loads them on first use, so `import paddle_xla` never imports Paddle."""
