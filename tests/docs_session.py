"""Runs one Markdown page (README.md, docs/*.md) as a reader pastes it, in the current (empty) folder.

    python tests/docs_session.py PAGE.md      (exits non-zero naming the page, the block and its heading)

The conventions, which tests/test_docs.py relies on and the pages are written to:

- Every ```python block runs, in page order, in this one process and one namespace (a notebook's
  session; __name__ is "__main__", and the current folder is first on sys.path).
- Every ```bash block runs as pasted by its own `bash -e` (so a failing line fails the block), with
  this interpreter's bin folder first on PATH (`paddle-xla`, `python` and `pip` are the environment's).
  Shell state (cd, variables) does not carry from one bash block to the next; files do.
- A block whose previous non-blank line is `<!-- not-run: REASON -->` is skipped (an install of
  accelerator wheels, `make demo`, a multi-host launch): python and bash alike. Other languages
  (text, json, yaml, ...) never run.
- The literal port 8000 (`:8000`, `--port 8000`, `--port=8000`) in any block is replaced by one free
  port the harness picks for the page, so a `paddle-xla serve ... --port 8000 &` in one block is
  reached by `curl localhost:8000/...` or `http://localhost:8000` in the later blocks, python or bash.
  A block that starts a server in the background must itself wait for it to be ready, as a reader
  would: `curl -sf --retry 120 --retry-delay 1 --retry-all-errors --retry-connrefused
  http://localhost:8000/v2/health/ready > /dev/null`.
- Each bash block runs in a process group of its own; whatever it leaves running in the background
  (`... &`) is stopped (SIGTERM, then SIGKILL) when the page ends, passes or fails, and when this
  process is sent SIGTERM.
- A bash block may run 900 s, a python block 900 s (BLOCK_TIMEOUT_S).
"""

from __future__ import annotations

import linecache
import os
import re
import signal
import socket
import subprocess
import sys
import time
import traceback
import types
from dataclasses import dataclass

BLOCK_TIMEOUT_S = 900
RUN = ("python", "bash")
NOT_RUN = re.compile(r"^<!--\s*not-run:\s*(.+?)\s*-->$")
OPEN_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)(.*)$")
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PORT = re.compile(r"(?<=:)8000\b|(?<=--port )8000\b|(?<=--port=)8000\b")


@dataclass
class Block:
    number: int  # 1-based, counting every fenced block of the page
    language: str
    code: str
    heading: str  # the nearest heading above it, with its #s ("## Serving"), or ""
    line: int  # the line of its opening fence, 1-based
    not_run: str | None  # the reason of a <!-- not-run: ... --> right above it


def blocks(text: str) -> list[Block]:
    """Every fenced block of a Markdown page, in order (fences may be indented, as in an admonition)."""
    found, heading, last_text = [], "", ""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = OPEN_FENCE.match(line)
        if fence:
            indent, marks, language = fence[1], fence[2], fence[3].lower()
            body, j = [], i + 1
            while j < len(lines) and not (
                lines[j].strip().startswith(marks[0] * len(marks)) and set(lines[j].strip()) == {marks[0]}
            ):
                body.append(lines[j][len(indent) :] if lines[j].startswith(indent) else lines[j].lstrip())
                j += 1
            reason = NOT_RUN.match(last_text.strip())
            found.append(
                Block(len(found) + 1, language, "\n".join(body) + "\n", heading, i + 1, reason[1] if reason else None)
            )
            i, last_text = j + 1, ""
            continue
        match = HEADING.match(line)
        if match:
            heading = f"{match[1]} {match[2]}"
        if line.strip():
            last_text = line
        i += 1
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class BlockFailed(Exception):
    pass


class Terminated(BaseException):
    """This process was sent SIGTERM (a test's timeout): stop, stopping the page's servers first."""


class Page:
    def __init__(self, path: str):
        self.path = path
        absolute = os.path.abspath(path)
        self.name = os.path.relpath(absolute, ROOT) if absolute.startswith(ROOT + os.sep) else path
        self.port = free_port()
        self.groups: list[int] = []  # the process groups of the bash blocks
        # NOTE: the blocks' module is sys.modules["__main__"], as in a Python prompt: pickle and inspect
        # find what the blocks define there (not in this file)
        main_module = types.ModuleType("__main__")
        sys.modules["__main__"] = main_module
        self.namespace = main_module.__dict__
        bin_dir = os.path.dirname(sys.executable)
        self.env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}

    def where(self, block: Block) -> str:
        return f"{self.name} block {block.number} ({block.heading or 'no heading'}, line {block.line})"

    def run(self) -> None:
        with open(self.path) as f:
            text = f.read()
        try:
            for block in blocks(text):
                if block.language not in RUN:
                    continue
                if block.not_run is not None:
                    print(f"--- {self.where(block)}: {block.language}: not run ({block.not_run})", flush=True)
                    continue
                print(f"--- {self.where(block)}: {block.language}", flush=True)
                code = PORT.sub(str(self.port), block.code)
                started = time.monotonic()
                (self.python if block.language == "python" else self.bash)(block, code)
                print(
                    f"--- {self.where(block)}: {block.language}: ok in {time.monotonic() - started:.1f} s", flush=True
                )
        finally:
            self.stop_background()

    def python(self, block: Block, code: str) -> None:
        def late(*_):
            raise TimeoutError(f"the block ran past {BLOCK_TIMEOUT_S} s")

        previous = signal.signal(signal.SIGALRM, late)
        signal.alarm(BLOCK_TIMEOUT_S)
        try:
            # NOTE: the source is kept in linecache under its block's name, so that tracebacks show its lines
            # and paddle.jit.to_static can read the source of a Layer the block defines
            filename = f"<{self.name} block {block.number}>"
            linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
            exec(compile(code, filename, "exec"), self.namespace)
        except BaseException as e:
            if isinstance(e, (KeyboardInterrupt, Terminated)):
                raise
            traceback.print_exc()
            raise BlockFailed(f"{self.where(block)}: python: {type(e).__name__}: {e}") from None
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)
            sys.stdout.flush()
            sys.stderr.flush()

    def bash(self, block: Block, code: str) -> None:
        # NOTE: a session of its own, so that the group holds every process the block leaves in the background
        proc = subprocess.Popen(
            ["bash", "-e", "-c", code], env=self.env, start_new_session=True, stdin=subprocess.DEVNULL
        )
        self.groups.append(proc.pid)
        try:
            code_ = proc.wait(BLOCK_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise BlockFailed(f"{self.where(block)}: bash: ran past {BLOCK_TIMEOUT_S} s") from None
        if code_ != 0:
            raise BlockFailed(f"{self.where(block)}: bash: exited with {code_}")

    def stop_background(self) -> None:
        """SIGTERM every bash block's process group, then SIGKILL what is left after 20 s."""
        alive = [g for g in self.groups if _signal_group(g, signal.SIGTERM)]
        deadline = time.monotonic() + 20
        while alive and time.monotonic() < deadline:
            time.sleep(0.2)
            alive = [g for g in alive if _signal_group(g, 0)]
        for g in alive:
            _signal_group(g, signal.SIGKILL)


def _signal_group(group: int, sig: int) -> bool:
    """Send sig to the group; whether it still has a process that is not a zombie (an orphan's
    zombie waits for init, which may never reap it in a container)."""
    try:
        os.killpg(group, sig)
    except (ProcessLookupError, PermissionError):
        return False
    if not os.path.isdir("/proc"):
        return True
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()  # NOTE: after the command name, which may hold spaces
        except (OSError, IndexError):
            continue
        if int(fields[2]) == group and fields[0] != "Z":
            return True
    return False


def _terminated(*_):
    raise Terminated()


def main(path: str) -> int:
    # NOTE: a pasted session's imports look in the current folder, never in tests/
    sys.path[0] = os.getcwd()
    # NOTE: SIGTERM (a test's timeout) still stops the page's servers, in Page.run's finally
    signal.signal(signal.SIGTERM, _terminated)
    page = Page(path)
    print(f"=== {page.name} (port 8000 is {page.port})", flush=True)
    try:
        page.run()
    except BlockFailed as e:
        print(f"DOCS FAILED: {e}", file=sys.stderr, flush=True)
        return 1
    except Terminated:
        print(f"DOCS FAILED: {page.name}: stopped by SIGTERM", file=sys.stderr, flush=True)
        return 143
    print(f"=== {page.name}: every block ran", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
