"""The command line as a user meets it: `paddle-xla export` then `run` give Paddle's numbers, and
every user mistake is one line on stderr that names the fix, with exit status 2."""

import dataclasses
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
    return subprocess.run(
        [sys.executable, "-c", boot, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
    )


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
    ran = cli(
        "run", "tiny.pxa", "-i", "x.npy", "-o", "y.npy", cwd=folder, code="import sys; sys.modules['paddle'] = None"
    )
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
    "no such module": (["check", "nosuch:build", "--input-spec", "x:float32[-1,4]"], "", ["cannot import 'nosuch'"]),
    "no such factory": (
        ["check", "tiny:nope", "--input-spec", "x:float32[-1,4]"],
        "",
        ["module 'tiny' has no 'nope'", "tiny:build"],
    ),
    "no paddle installed": (
        ["check", "tiny:build", "--input-spec", "x:float32[-1,4]"],
        "import sys; sys.modules['paddle'] = None",
        ["pip install 'paddle_xla[paddle]'"],
    ),
    "a bad artifact": (["run", "missing.pxa", "-i", "x.npy"], "", ["No artifact at 'missing.pxa'"]),
    "a class that needs arguments": (
        ["check", "tiny:Sized", "--input-spec", "x:float32[-1,4]"],
        "",
        ["'tiny:Sized' cannot be built without arguments", "def build()"],
    ),
    "an unknown suite": (["install", "paddlenlp"], "", ["unknown suite 'paddlenlp'", "choose paddleformers"]),
    "a checkpoint's option for a Layer": (
        ["export", "tiny:build", "--input-spec", "x:float32[-1,4]", "-o", "t.pxa", "--speculative-config", "{}"],
        "",
        ["tiny:build is not a PaddleFormers checkpoint folder", "--speculative-config is for one"],
    ),
    "a checkpoint's batch for a Layer": (
        ["export", "tiny:build", "--input-spec", "x:float32[-1,4]", "-o", "t.pxa", "--max-batch-size", "0"],
        "",
        ["tiny:build is not a PaddleFormers checkpoint folder", "--max-batch-size is for one"],
    ),
    "a wrong rank": (
        ["export", "paddle.vision.models:LeNet", "--input-spec", "x:float32[-1,28,28]", "-o", "l.pxa"],
        "",
        [
            "LeNet does not accept the input --input-spec x:float32[-1,28,28]",
            "should be a 4-D or 5-D",
            "input's dimension is 3",
            "Give each input the rank and sizes its forward expects",
        ],
    ),
}


def test_the_readmes_layer_class_exports(folder):
    """README's Quick start: `paddle-xla export paddle.vision.models:LeNet ...` (a Layer class, built with no
    arguments) writes what px.export writes."""
    made = cli(
        "export", "paddle.vision.models:LeNet", "--input-spec", "x:float32[-1,1,28,28]", "-o", "lenet.pxa", cwd=folder
    )
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


def test_install_pip_installs_the_pinned_list_no_deps_into_this_python_then_skips(monkeypatch):
    """`paddle-xla install paddleformers`: the one pinned list (tools/zoo.py reads it from here), pip --no-deps
    into sys.executable's environment so numpy and JAX stay; nothing run when it is there already."""
    from paddle_xla.cli import install as inst

    ran, said, state = [], [], {"there": False}

    def fake_pip(command):
        ran.append(command)
        state["there"] = True
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(inst, "missing", lambda s: [] if state["there"] else list(s.packages))
    assert inst.install("paddleformers", echo=said.append, run=fake_pip) == 0
    assert ran == [[sys.executable, "-m", "pip", "install", "--no-deps", *inst.PADDLEFORMERS]]
    assert "paddleformers==1.2.0" in ran[0] and not any("numpy" in p or "jax" in p for p in ran[0])
    assert "installed paddleformers 1.2.0 into" in said[-1] and sys.prefix in said[-1]
    said.clear()
    assert inst.install("PaddleFormers", echo=said.append, run=fake_pip) == 0 and len(ran) == 1
    assert said == [f"paddleformers 1.2.0 is already installed in {sys.prefix}: nothing to do"]
    state["there"] = False
    failed = inst.install("paddleformers", echo=said.append, run=lambda c: subprocess.CompletedProcess(c, 3))
    assert failed == 3 and said[-1].startswith("error: pip failed (exit status 3)")
    zoo = _load_tools_zoo()
    assert zoo.PACKAGES is inst.PADDLEFORMERS


def _load_tools_zoo():
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools", "zoo.py")
    spec = importlib.util.spec_from_file_location("tools_zoo", path)
    zoo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(zoo)
    return zoo


def test_install_reads_what_is_there_and_the_console_command_skips_when_installed(tmp_path):
    from paddle_xla.cli.install import SUITES, missing

    assert missing(dataclasses.replace(SUITES["paddleformers"], module="no_such_module_here")) == list(
        SUITES["paddleformers"].packages
    )
    if missing(SUITES["paddleformers"]):
        pytest.skip("PaddleFormers is not installed here: `paddle-xla install paddleformers` (make test does)")
    res = cli("install", "paddleformers", cwd=tmp_path)
    assert res.returncode == 0 and "is already installed" in res.stdout, res.stdout + res.stderr[-2000:]


def test_the_trainer_integration_without_paddleformers_names_the_install_command(tmp_path):
    """PaddleFormers is in the test venv, so its absence is simulated: an import hook refuses it."""
    code = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "paddleformers":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Block())
try:
    import paddle_xla.integrations.paddleformers
except ImportError as e:
    print("IMPORT ERROR:", e)
"""
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert "IMPORT ERROR:" in res.stdout, res.stdout + res.stderr[-2000:]
    assert "paddle-xla install paddleformers" in res.stdout and "numpy 1.26" in res.stdout
