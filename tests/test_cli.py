"""The command line as a user meets it: `paddle-xla export` then `run` give Paddle's numbers, and
every user mistake is one line on stderr that names the fix, with exit status 2."""
import os
import subprocess
import sys

import numpy as np
import paddle
import pytest

TINY = """
import paddle


def build():
    paddle.seed(7)
    return paddle.nn.Sequential(paddle.nn.Linear(4, 8), paddle.nn.Tanh(), paddle.nn.Linear(8, 3))


class Sized(paddle.nn.Layer):
    def __init__(self, width):
        super().__init__()
        self.fc = paddle.nn.Linear(4, width)

    def forward(self, x):
        return self.fc(x)
"""


def cli(*args, cwd, env=None, code=""):
    """paddle-xla ARGS in a fresh process (as the console script runs it)."""
    boot = f"{code}\nfrom paddle_xla.cli.main import main\nmain()"
    return subprocess.run([sys.executable, "-c", boot, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    (d / "tiny.py").write_text(TINY)
    return d


def test_export_then_run_gives_paddles_outputs(folder):
    x = np.random.default_rng(0).standard_normal((5, 4)).astype("float32")
    np.save(folder / "x.npy", x)
    made = cli("export", "tiny:build", "--input-spec", "x:float32[-1,4]", "-o", "tiny.pxa", cwd=folder)
    assert made.returncode == 0, made.stderr[-2000:]
    assert "wrote tiny.pxa" in made.stdout and "symbolic" in made.stdout
    ran = cli("run", "tiny.pxa", "-i", "x.npy", "-o", "y.npy", cwd=folder, code="import sys; sys.modules['paddle'] = None")
    assert ran.returncode == 0, ran.stderr[-2000:]
    sys.path.insert(0, str(folder))
    try:
        import tiny
        want = tiny.build()(paddle.to_tensor(x)).numpy()
    finally:
        sys.path.remove(str(folder))
    np.testing.assert_allclose(np.load(folder / "y.npy"), want, rtol=1e-5, atol=1e-6)


MISTAKES = {
    "no input spec": (["check", "tiny:build"], "", ["add --input-spec NAME:DTYPE[d0,d1,...]"]),
    "a dot for the colon": (["check", "tiny.build"], "", ["neither MODULE:FACTORY", "note the colon"]),
    "no such module": (["check", "nosuch:build", "--input-spec", "x:float32[-1,4]"], "",
                       ["cannot import 'nosuch'"]),
    "no such factory": (["check", "tiny:nope", "--input-spec", "x:float32[-1,4]"], "",
                        ["module 'tiny' has no 'nope'", "tiny:build"]),
    "no paddle installed": (["check", "tiny:build", "--input-spec", "x:float32[-1,4]"],
                            "import sys; sys.modules['paddle'] = None", ["pip install 'paddle_xla[paddle]'"]),
    "a bad artifact": (["run", "missing.pxa", "-i", "x.npy"], "", ["No artifact at 'missing.pxa'"]),
    "a class that needs arguments": (["check", "tiny:Sized", "--input-spec", "x:float32[-1,4]"], "",
                                     ["'tiny:Sized' cannot be built without arguments", "def build()"]),
}


def test_the_readmes_layer_class_exports(folder):
    """README's Quick start: `paddle-xla export paddle.vision.models:LeNet ...` (a Layer class, built with no
    arguments) writes what px.export writes."""
    made = cli("export", "paddle.vision.models:LeNet", "--input-spec", "x:float32[-1,1,28,28]", "-o", "lenet.pxa",
               cwd=folder)
    assert made.returncode == 0, made.stderr[-2000:]
    assert "wrote lenet.pxa" in made.stdout


@pytest.mark.parametrize("case", list(MISTAKES))
def test_a_mistake_is_one_line_and_status_2(folder, case):
    args, code, fragments = MISTAKES[case]
    np.save(folder / "x.npy", np.zeros((2, 4), "float32"))
    res = cli(*args, cwd=folder, code=code)
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert res.returncode == 2, res.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr[-2000:]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_verbose_shows_the_traceback(folder):
    res = cli("--verbose", "check", "tiny.build", cwd=folder)
    assert res.returncode != 0 and "Traceback" in res.stderr and "TargetError" in res.stderr
