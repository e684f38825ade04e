"""Runs README.md as a user pastes it: every ```python block in order in one namespace (a notebook's
session), and the Quick start's ```bash lines as a shell would, with `paddle-xla serve ... &` started
in the background on a free port that the later blocks' localhost:8000 then names.

Usage: python readme_session.py README.md   (in an empty folder; exits non-zero naming the block)"""
import os
import re
import shlex
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve.harness import ServeProcess  # noqa: E402

# NOTE: the Language models section imports PaddleFormers, as its users have it installed: `make test`
# installs it in the venv with `paddle-xla install paddleformers`.

FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)


def blocks(text: str):
    """(language, code, the section heading it is under, the subsection's or '') of each fenced block."""
    for match in FENCE.finditer(text):
        before = text[:match.start()]
        heading = re.findall(r"^## (.+)$", before, re.M)
        section = heading[-1] if heading else ""
        # NOTE: a ### heading counts only within its own ## section
        sub = re.findall(r"^### (.+)$", before[before.rfind(f"\n## {section}\n"):], re.M) if section else []
        yield match[1], match[2], section, sub[-1] if sub else ""


SHELL_RUN = ("Quick start", "Serving language models")   # the (sub)sections whose ```bash lines are run too


def run_shell(code: str, server: list, address: list):
    for line in code.splitlines():
        words = shlex.split(line.replace("localhost:8000", address[0]), comments=True)
        if not words:
            continue
        if words[:2] == ["paddle-xla", "serve"]:
            flags = [w for w in words[3:] if w != "&"]
            flags = [f for i, f in enumerate(flags) if f != "--port" and (i == 0 or flags[i - 1] != "--port")]
            server.append(ServeProcess(os.path.abspath(words[2]), *flags))
            address[0] = f"127.0.0.1:{server[-1].port}"      # NOTE: later blocks talk to the latest server
            continue
        cmd = [sys.executable, "-m", "paddle_xla.cli", *words[1:]] if words[0] == "paddle-xla" else words
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        print(f"$ {line}\n{done.stdout}{done.stderr}", flush=True)
        if done.returncode != 0:
            raise SystemExit(f"README shell line failed ({done.returncode}): {line}")


def main(path: str):
    namespace: dict = {"__name__": "__readme__"}
    server: list = []
    address = ["localhost:8000"]
    try:
        for i, (language, code, section, sub) in enumerate(blocks(open(path).read()), 1):
            if language == "python":
                print(f"--- block {i} ({section}): python", flush=True)
                exec(compile(code.replace("localhost:8000", address[0]), f"README block {i} ({section})", "exec"),
                     namespace)
            elif language == "bash" and (section in SHELL_RUN or sub in SHELL_RUN):
                print(f"--- block {i} ({section}): bash", flush=True)
                run_shell(code, server, address)
    finally:
        for s in server:
            s.stop()


if __name__ == "__main__":
    main(sys.argv[1])
