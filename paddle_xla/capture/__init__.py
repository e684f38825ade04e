"""Paddle -> Graph: the only package that reads Paddle's IR (PIR). An edge: it imports paddle.

sources.py         the three sources: a Layer with InputSpecs, a static Program, a saved inference model
pir_reader.py      a PIR Program -> Graph, op by op (in-place ops resolved, blocks nested)
to_static_help.py  what paddle.jit.to_static should leave to Python, and what to say when it fails
wrap.py            a network and its loss joined into one forward, so that one capture sees both
stage_markers.py   `with px.stage(k):` in model code, read back as op -> stage after capture
aborts.py          patterns that make Paddle abort the process, raised as CaptureErrors first
gpu_only_ops.py    ops Paddle's CPU build has no kernel for (fused_rms_norm_ext), built from their parts
layer_ops.py       a registered Layer class captured as one op (layer-level lowerings); moe_layers.py: MoE blocks
eager_only.py      eager-only calls PaddleFormers' models make (Tensor.view, view_as), as the reshapes they mean
causal_lm.py       a causal LM as the prefill and decode-step programs of a fixed-shape decode loop
"""

from .sources import Captured, from_inference_model, from_layer, from_program  # noqa: F401
