"""Small models exported once per session with Paddle, and the server most tests share.

twoheads  x[-1,8], y[-1,4] -> [-1,4], [-1,16]: rows independent, so dynamically batched
fixed     x[2,8] -> [2,3]: no free dimension, so served unbatched
bert      a small BertLikeEncoder (tests/zoo.py): batch and sequence length free, attention-masked
cuda_only twoheads exported for CUDA only, so re-lowered here from its Graph
"""

import os
import shutil

import pytest

from paddle_xla.artifact import reader as pxa

from .harness import ServeProcess

MAIN_FLAGS = ("--seq-buckets", "16,32", "--max-batch-size", "16")


def _export_models(folder):
    import paddle
    from paddle.static import InputSpec
    from test_artifact import SPECS, TwoHeads
    from zoo import BertLikeEncoder

    import paddle_xla as px
    from paddle_xla.artifact.writer import export

    class Fixed(paddle.nn.Layer):
        def __init__(self):
            super().__init__()
            self.fc = paddle.nn.Linear(8, 3)

        def forward(self, x):
            return paddle.nn.functional.softmax(self.fc(x))

    paddle.seed(0)
    nets = {
        "twoheads": (TwoHeads(), SPECS),
        "fixed": (Fixed(), [InputSpec([2, 8], "float32", "x")]),
        "bert": (BertLikeEncoder(vocab=100, hidden=32, layers=1, heads=2, ffn=64, max_pos=64), BertLikeEncoder.specs()),
    }
    for name, (net, specs) in nets.items():
        net.eval()
        export(px.compile(net, specs), os.path.join(folder, f"{name}.pxa"))
    # NOTE: no executable for this CPU: the server re-lowers its Graph, and reads its layout from the specs
    export(px.compile(nets["twoheads"][0], SPECS), os.path.join(folder, "cuda_only.pxa"), platforms=("cuda",))


@pytest.fixture(scope="session")
def model_dirs(tmp_path_factory):
    """{"all": every model, "small": twoheads alone} (folders of .pxa files)."""
    everything = tmp_path_factory.mktemp("models")
    _export_models(str(everything))
    small = tmp_path_factory.mktemp("small")
    shutil.copy(everything / "twoheads.pxa", small / "twoheads.pxa")
    return {"all": str(everything), "small": str(small)}


@pytest.fixture(scope="session")
def artifacts(model_dirs):
    """The same artifacts, loaded in the test process: what every served answer must equal."""
    folder = model_dirs["all"]
    return {name[:-4]: pxa.load(os.path.join(folder, name)) for name in os.listdir(folder)}


@pytest.fixture(scope="session")
def main_server(model_dirs):
    server = ServeProcess(model_dirs["all"], *MAIN_FLAGS)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory):
    """A tiny PaddleFormers checkpoint folder (tests/serve/checkpoint_server.py): (folder, the Paddle model it
    holds, generation_config.json's eos list, the compile cache folder its server uses)."""
    from .checkpoint_server import make_checkpoint

    return make_checkpoint(tmp_path_factory)


@pytest.fixture(scope="session")
def checkpoint_server(checkpoint):
    """`paddle-xla serve FOLDER` on that checkpoint folder."""
    from .checkpoint_server import serve_checkpoint

    server = serve_checkpoint(checkpoint)
    yield server
    server.stop()
    server.no_compiles_after_ready()


@pytest.fixture(scope="session")
def chars_server(tmp_path_factory):
    """A tiny Llama with a character-level tokenizer (tests/serve/chars_server.py), --tool-call-parser hermes."""
    from .chars_server import serve_chars

    server = serve_chars(tmp_path_factory.mktemp("chars"))
    yield server
    server.stop()
    server.no_compiles_after_ready()
