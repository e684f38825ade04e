"""Print the PIR ops (name, attributes, operand count) that a Paddle call produces.

    .venv/bin/python tools/show_ops.py "paddle.nn.functional.gelu(a, approximate=True)" "a:float32[2,3]"

Names a..f are the inputs, in order. Useful when writing a lowering: the operands arrive in this order."""

import sys

import paddle  # noqa: F401
import paddle.nn.functional as F  # noqa: F401
from paddle.static import InputSpec

sys.path.insert(0, __file__.rsplit("/", 2)[0])
from paddle_xla import capture


def main(expr: str, *specs: str):
    parsed = []
    for s in specs:
        name, rest = s.split(":")
        dtype, dims = rest.split("[")
        parsed.append(InputSpec([int(d) for d in dims.rstrip("]").split(",") if d], dtype, name))
    names = [p.name for p in parsed]
    src = f"def forward(self, {', '.join(names)}):\n    return {expr}\n"
    path = "/tmp/_show_ops_layer.py"
    with open(path, "w") as f:
        f.write("import paddle\nimport paddle.nn.functional as F\nclass L(paddle.nn.Layer):\n")
        f.write("".join("    " + line + "\n" for line in src.splitlines()))
    import importlib.util

    spec = importlib.util.spec_from_file_location("_show_ops_layer", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    graph = capture.from_layer(mod.L(), parsed).graph
    for op in graph.ops():
        print(op.name, f"inputs={len(op.inputs)} outputs={len(op.outputs)}", op.attrs)


if __name__ == "__main__":
    main(*sys.argv[1:])
