"""The docs run as they stand: README.md and every docs/*.md page, each in a fresh process in an empty
folder (tests/docs_session.py states the conventions: not-run blocks, port 8000, background servers).
A page whose first lines carry `<!-- docs-test: slow -->` is marked slow. Also: docs/ops.md is current,
the API reference lists exactly paddle_xla's public names, and every page is in mkdocs.yml's nav."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from xla_flags import child_env

ROOT = Path(__file__).resolve().parents[1]
SESSION = ROOT / "tests" / "docs_session.py"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PAGE_TIMEOUT_S = 1800
SLOW = "<!-- docs-test: slow -->"


def run_page(page: Path, cwd: Path, timeout: float = PAGE_TIMEOUT_S, **env) -> tuple[int, str]:
    """(exit status, stdout and stderr interleaved) of docs_session.py on `page`, run in `cwd`. On a
    timeout the session gets SIGTERM first, so that it stops the servers its page started."""
    proc = subprocess.Popen(
        [sys.executable, str(SESSION), str(page)],
        cwd=cwd,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=child_env(devices=16, PYTHONUNBUFFERED="1", **env),
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        out += f"\n(the page ran past {timeout} s)"
    return proc.returncode, out


def _needs_paddleformers(text: str) -> bool:
    return bool(re.search(r"^\s*(from|import)\s+paddleformers\b", text, re.M))


@functools.cache
def _paddleformers_unavailable() -> str | None:
    """Why a page that imports PaddleFormers cannot run here, or None: it is installed, or the page's
    own `paddle-xla install paddleformers` can install it."""
    if importlib.util.find_spec("paddleformers") is not None:
        return None
    probe = subprocess.run(
        [sys.executable, "-m", "paddle_xla.cli", "install", "--help"], capture_output=True, env=child_env(), timeout=120
    )
    return None if probe.returncode == 0 else "PaddleFormers is not installed and `paddle-xla install` is missing"


def _page_param(page: Path):
    head = page.read_text()[:2000]
    marks = [pytest.mark.slow] if SLOW in head else []
    return pytest.param(page, marks=marks, id=str(page.relative_to(ROOT)))


@pytest.mark.parametrize("page", [_page_param(p) for p in PAGES])
def test_page_runs_as_pasted(page: Path, tmp_path):
    if _needs_paddleformers(page.read_text()) and (why := _paddleformers_unavailable()):
        pytest.skip(why)
    code, out = run_page(page, tmp_path)
    failed = [line for line in out.splitlines() if line.startswith("DOCS FAILED")]
    assert code == 0, "\n".join(failed) + "\n...\n" + out[-8000:]


def test_a_failing_block_is_named(tmp_path):
    page = tmp_path / "planted.md"
    page.write_text(
        textwrap.dedent("""\
        # Planted

        ```python
        x = 41
        ```

        ## The second block

        ```python
        raise ValueError(f"planted {x + 1}")
        ```
        """)
    )
    work = tmp_path / "work"
    work.mkdir()
    code, out = run_page(page, work, timeout=120)
    assert code == 1, out
    failed = [line for line in out.splitlines() if line.startswith("DOCS FAILED")]
    assert len(failed) == 1 and "planted.md block 2 (## The second block" in failed[0], out
    assert "ValueError: planted 42" in failed[0], out


def test_ports_servers_and_skipped_blocks(tmp_path):
    """Port 8000 is one free port for the whole page, a background server is reached from bash and Python
    and stopped when the page fails, and a not-run block is skipped."""
    page = tmp_path / "served.md"
    page.write_text(
        textwrap.dedent("""\
        # Served

        ```bash
        ADDRESS=localhost:8000
        python -m http.server ${ADDRESS#*:} --bind 127.0.0.1 > /dev/null 2>&1 &
        echo $! > server.pid
        curl -sf --retry 30 --retry-delay 1 --retry-all-errors --retry-connrefused http://localhost:8000/ > /dev/null
        ```

        ```python
        import urllib.request
        print("status", urllib.request.urlopen("http://localhost:8000/server.pid").status)
        ```

        <!-- not-run: planted, never runs -->
        ```bash
        exit 3
        ```

        ```text
        not code
        ```

        ```python
        raise SystemExit("planted stop")
        ```
        """)
    )
    work = tmp_path / "work"
    work.mkdir()
    code, out = run_page(page, work, timeout=180)
    assert code == 1 and "status 200" in out and "not run (planted, never runs)" in out, out
    assert "served.md block 5 (# Served" in out, out
    pid = int((work / "server.pid").read_text())
    assert not Path(f"/proc/{pid}").exists() or Path(f"/proc/{pid}/stat").read_text().rsplit(")")[1].split()[0] == "Z"


def test_ops_page_is_current():
    r = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gen_ops_page.py"), "--check"],
        capture_output=True,
        text=True,
        env=child_env(),
    )
    assert r.returncode == 0, r.stderr + "docs/ops.md is stale: run .venv/bin/python tools/gen_ops_page.py"


def _reference_entries() -> list[tuple[str, str]]:
    """(public name, dotted path) of each `::: path` entry of docs/reference.md; the public name is its
    `heading: px.NAME` option."""
    text = (ROOT / "docs" / "reference.md").read_text()
    entries = re.findall(r"^::: ([\w.]+)\n((?:[ \t]+.*\n)*)", text, re.M)
    out = []
    for path, options in entries:
        heading = re.search(r"heading:\s*[\"']?px\.(\w+)", options)
        assert heading, f"docs/reference.md: {path} has no `heading: px.NAME` option"
        out.append((heading[1], path))
    return out


def test_reference_lists_every_public_name():
    import paddle_xla

    entries = _reference_entries()
    names = [name for name, _ in entries]
    assert len(names) == len(set(names)), f"listed twice: {sorted(n for n in names if names.count(n) > 1)}"
    for name, path in entries:
        module, attr = path.rsplit(".", 1)
        documented = getattr(importlib.import_module(module), attr)
        assert getattr(paddle_xla, name) is documented, f"px.{name} is not {path}"
    assert sorted(names) == sorted(paddle_xla.__all__), (
        f"missing from docs/reference.md: {sorted(set(paddle_xla.__all__) - set(names))}; "
        f"not in paddle_xla.__all__: {sorted(set(names) - set(paddle_xla.__all__))}"
    )


def test_every_page_is_in_the_nav():
    nav = re.findall(r"^\s*-\s*[^:\n]+:\s*(\S+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), re.M)
    pages = sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    assert sorted(nav) == pages, f"mkdocs.yml's nav: {sorted(nav)}; docs/: {pages}"
    assert all((ROOT / "docs" / n).exists() for n in nav)


def test_the_readme_stays_a_front_door():
    size = len((ROOT / "README.md").read_text())
    assert size <= 10_000, f"README.md is {size} characters: keep it at most 10,000 (move detail into docs/)"
