"""`paddle-xla install SUITE`: bring one of Paddle's model suites into this environment beside paddle_xla
without breaking JAX.

A plain `pip install paddleformers` resolves PaddleFormers' own pins and pulls numpy 1.26, which breaks JAX
(it needs numpy 2). This installs a pinned list of pure-Python packages with `pip install --no-deps` into the
environment that runs paddle_xla (sys.executable), so numpy, JAX and Paddle stay as they are. The list lives
here only: tools/zoo.py and the Makefile's `make test` use it through this module."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
import subprocess
import sys
from collections.abc import Callable, Sequence

# NOTE: PaddleFormers 1.2's pure-Python dependencies, pinned where its own pins and transformers' meet.
PADDLEFORMERS = (
    "paddleformers==1.2.0",
    "transformers>=5.0,<5.4",
    "huggingface_hub>=1.3,<2",
    "tokenizers>=0.22,<=0.23.0",
    "colorlog",
    "regex",
    "requests",
    "urllib3",
    "aistudio_sdk",
    "psutil",
    "six",
    "omegaconf",
    "antlr4-python3-runtime==4.9.3",
    "pyyaml",
    "charset_normalizer",
    "idna",
    "certifi",
)


@dataclasses.dataclass(frozen=True)
class Suite:
    module: str  # the import name that shows the suite is there
    version: str  # the pinned version of its own distribution
    packages: Sequence[str]  # pip requirements, installed --no-deps


SUITES = {"paddleformers": Suite("paddleformers", "1.2.0", PADDLEFORMERS)}


class UnknownSuite(Exception):
    """A suite name this command does not know: the message names the choices."""


def suite(name: str) -> Suite:
    try:
        return SUITES[name.lower()]
    except KeyError:
        raise UnknownSuite(
            f"unknown suite {name!r}: choose {' or '.join(SUITES)} (e.g. paddle-xla install {next(iter(SUITES))})"
        ) from None


def missing(s: Suite) -> list[str]:
    """The requirements of `s` this environment does not satisfy ([] = nothing to install). Reads installed
    metadata only (importing PaddleFormers takes seconds)."""
    if importlib.util.find_spec(s.module) is None:
        return list(s.packages)
    try:
        from packaging.requirements import Requirement
    except ImportError:  # pragma: no cover - pip's environments have it; without it only the names are checked
        Requirement = None
    out = []
    for text in s.packages:
        name = Requirement(text).name if Requirement else text.split("=")[0].split("<")[0].split(">")[0]
        try:
            have = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out.append(text)
            continue
        if Requirement and have not in Requirement(text).specifier:
            out.append(text)
    return out


def pip_command(s: Suite, python: str | None = None) -> list[str]:
    return [python or sys.executable, "-m", "pip", "install", "--no-deps", *s.packages]


def install(
    name: str, echo: Callable[[str], None] = print, run: Callable[..., subprocess.CompletedProcess] = subprocess.run
) -> int:
    """Install suite `name` into this environment; the exit status. Says what it did in one or two lines."""
    s = suite(name)
    where = sys.prefix
    if not missing(s):
        echo(f"{s.module} {s.version} is already installed in {where}: nothing to do")
        return 0
    command = pip_command(s)
    echo(
        f"installing {s.module} {s.version} into {where} ({len(s.packages)} pinned packages, --no-deps: "
        "numpy, JAX and Paddle stay as they are):"
    )
    echo("  " + " ".join(command))
    done = run(command)
    importlib.invalidate_caches()  # NOTE: find_spec must see the folders pip just wrote
    if done.returncode != 0:
        echo(f"error: pip failed (exit status {done.returncode}); the command above shows what it ran")
        return done.returncode or 1
    if missing(s):
        echo(f"error: pip finished but {', '.join(missing(s))} is still not satisfied in {where}")
        return 1
    echo(f"installed {s.module} {s.version} into {where}; `import {s.module}` works in this environment")
    return 0
