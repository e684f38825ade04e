"""Graph -> one pure JAX function, each op as one LoweringPolicy says. Paddle-free.

  policy.py         LoweringPolicy: precision, target platform, layouts; every choice not the program's own
  lower.py          lower(graph, policy) -> f(params, buffers, feeds, key) -> (fetches, new_buffers)
  interpreter.py    runs a Graph's ops on JAX values while jax traces them; the coverage check
  checking.py       a Graph checked as compiling would check it, on abstract values (no compile)
  kernels.py        where the policy computes an op otherwise than its lowering (half, fast forms, held layouts)
  half.py           Paddle AMP O1: which ops run in half, which in float32
  channels_last.py  CNN activations held NHWC between the ops that can take them so
  layouts.py        weights held in the layout the backend's kernels read (HWIO filters, [N, K] matmul weights)
  int8.py           weight-only int8: matmul weights as int8 values and per-channel scales
  shared_products.py  several Graphs of one model as one function sharing each linear layer's product

The lowerings themselves are in paddle_xla.ops; they stay layout-free and precision-free."""
