"""The README's op list is generated from the registry, never hand-written."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_readme_ops_section_is_current():
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_readme_ops.py"), "--check"])
    assert r.returncode == 0, "README.md's op list is stale: run .venv/bin/python tools/gen_readme_ops.py"
