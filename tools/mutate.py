"""`make mutate`: mutation testing (cosmic-ray) of the files a change touches, each against the tests
that import it; prints each file's kill rate. Not in CI: a file takes minutes.

  python tools/mutate.py [FILE ...]     default: the paddle_xla/ files changed since BASE (env, HEAD~1)

NOTE: cosmic-ray writes each mutant into the file on disk while its tests run, and puts it back;
do not edit the tree meanwhile."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
TIMEOUT_S = 300


def changed_files(base: str) -> list[str]:
    out = subprocess.run(
        ["git", "diff", "--name-only", base, "--", "paddle_xla"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return [f for f in out if f.endswith(".py") and not f.endswith("__init__.py") and (ROOT / f).exists()]


def tests_for(path: str) -> list[str]:
    """Test files that import the module at `path` (by its dotted name or as `from pkg import name`)."""
    dotted = path[:-3].replace("/", ".")
    parent, leaf = dotted.rsplit(".", 1)
    pattern = re.compile(rf"({re.escape(dotted)}\b|from {re.escape(parent)} import [^\n]*\b{leaf}\b)")
    found = []
    for test in sorted((ROOT / "tests").rglob("test_*.py")):
        if pattern.search(test.read_text()):
            found.append(str(test.relative_to(ROOT)))
    return found


def kill_rate(path: str, tests: list[str], work: Path) -> tuple[int, int]:
    """(killed, mutants) of `path` against `tests`."""
    config, session = work / "cr.toml", work / "session.sqlite"
    command = f"{PY} -m pytest -x -q -p no:cacheprovider {' '.join(tests)}"
    config.write_text(
        f'[cosmic-ray]\nmodule-path = "{path}"\ntimeout = {TIMEOUT_S}.0\nexcluded-modules = []\n'
        f'test-command = "{command}"\n\n[cosmic-ray.distributor]\nname = "local"\n'
    )
    cr = [str(Path(PY).parent / "cosmic-ray")]
    subprocess.run([*cr, "init", str(config), str(session)], cwd=ROOT, check=True)
    subprocess.run([*cr, "exec", str(config), str(session)], cwd=ROOT, check=True)
    dump = subprocess.run([*cr, "dump", str(session)], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    outcomes = re.findall(r'"test_outcome": "(\w+)"', dump)
    return sum(o == "killed" for o in outcomes), len(outcomes)


def main(files: list[str]) -> int:
    files = files or changed_files(os.environ.get("BASE", "HEAD~1"))
    if not files:
        print("mutate: no changed paddle_xla/ files (give FILES=... or BASE=...)")
        return 0
    rows = []
    for path in files:
        tests = tests_for(path)
        if not tests:
            rows.append((path, "no test imports it"))
            continue
        with tempfile.TemporaryDirectory() as tmp:
            killed, total = kill_rate(path, tests, Path(tmp))
        rows.append(
            (path, f"{killed}/{total} mutants killed ({killed / max(total, 1):.0%}) by {len(tests)} test file(s)")
        )
    for path, result in rows:
        print(f"{path}: {result}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
