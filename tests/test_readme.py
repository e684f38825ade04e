"""The README's op list is generated from the registry, never hand-written."""
import subprocess
import sys
from pathlib import Path

from xla_flags import child_env

ROOT = Path(__file__).resolve().parents[1]


def test_readme_ops_section_is_current():
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_readme_ops.py"), "--check"])
    assert r.returncode == 0, "README.md's op list is stale: run .venv/bin/python tools/gen_readme_ops.py"


def test_readme_runs_as_pasted(tmp_path):
    """Every Python block, in order, in a fresh process in an empty folder; the Quick start's shell
    lines too, with the server it starts stopped at the end (tests/readme_session.py)."""
    env = child_env(devices=16, PYTHONUNBUFFERED="1")
    run = subprocess.run([sys.executable, str(ROOT / "tests" / "readme_session.py"), str(ROOT / "README.md")],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1500)
    assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-6000:])
    for section in ("Quick start", "Training", "Strategy", "Model parallelism", "Language models", "Serving"):
        assert f"({section}): python" in run.stdout, section
    assert "wrote logits.npy" in run.stdout and '"name":"lenet"' in run.stdout.replace(" ", "")
    assert (tmp_path / "lenet.pxa").exists() and (tmp_path / "logits.npy").exists()
