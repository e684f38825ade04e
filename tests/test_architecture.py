"""ARCHITECTURE.md is the codemap, and these checks keep it true (cheap: files are read and parsed, nothing
is imported or compiled).

How ARCHITECTURE.md names paths, the rule the checks resolve them by:
- a backticked token ending in `.py` or `/` with no `/` inside it (`batch_engine.py`, `capture/`):
  a bare file name is a module of the package whose `### \\`pkg/\\`` entry it sits in (paddle_xla/ itself
  outside a package entry); a bare folder is under paddle_xla/ or the repository root;
- a token with a `/` inside (`generation/batch_engine.py`, `tests/xla_flags.py`) starts at paddle_xla/ or
  at the repository root, and must exist in exactly one of them.
Package docstrings (paddle_xla/**/__init__.py) name modules the same way: a bare file name is a module of
that package, a name with a `/` starts at paddle_xla/ or the repository root.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "paddle_xla"
DOC = ROOT / "ARCHITECTURE.md"

_PATH = re.compile(r"[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)*(?:\.py|/)")
_HEADING_PKG = re.compile(r"^###\s+`([\w/]+)/`")


def _text() -> str:
    return DOC.read_text(encoding="utf-8")


def _packages() -> list[str]:
    """Every package under paddle_xla/ (a folder with __init__.py), as 'serve/llm'."""
    return sorted(p.parent.relative_to(PKG).as_posix() for p in PKG.rglob("__init__.py") if p.parent != PKG)


def _sections(text: str):
    """(package named by the `### `pkg/`` heading or None, heading, body) for each part of the page."""
    package, heading, body = None, "", []
    for line in text.splitlines():
        if line.startswith("#"):
            yield package, heading, body
            m = _HEADING_PKG.match(line)
            package, heading, body = (m.group(1) if m else None), line, []
        else:
            body.append(line)
    yield package, heading, body


def _resolve(token: str, package: str | None) -> list[Path]:
    """The existing paths a token may name, by the module docstring's rule (more than one: ambiguous)."""
    inner = token.rstrip("/")
    if "/" not in inner and token.endswith(".py"):
        base = PKG / package if package else PKG
        return [base / token] if (base / token).is_file() else []
    found = [b / inner for b in (PKG, ROOT) if (b / inner).exists()]
    if token.endswith("/"):
        found = [p for p in found if p.is_dir()]
    return found


def test_every_package_has_an_entry():
    entries = {pkg for pkg, _, _ in _sections(_text()) if pkg}
    missing = [p for p in _packages() if p not in entries]
    assert not missing, (
        "packages with no entry in ARCHITECTURE.md (add a heading "
        "'### `<pkg>/`: Paddle-free' or ': imports paddle' saying what it holds): "
        + ", ".join(f"paddle_xla/{p}/" for p in missing)
    )


def test_every_path_named_exists():
    problems = []
    for package, heading, body in _sections(_text()):
        for token in re.findall(r"`([^`\s]+)`", "\n".join(body)):
            if not _PATH.fullmatch(token):
                continue
            found = _resolve(token, package)
            where = heading or "the introduction"
            if not found:
                bare_file = "/" not in token.rstrip("/") and token.endswith(".py")
                base = (f"paddle_xla/{package}/" if package else "paddle_xla/") if bare_file else "paddle_xla/ and ./"
                problems.append(f"`{token}` (under {where!r}) names no file: looked in {base}")
            elif len(found) > 1:
                problems.append(f"`{token}` (under {where!r}) is ambiguous: " + ", ".join(map(str, found)))
    assert not problems, "ARCHITECTURE.md names paths that do not exist:\n" + "\n".join(problems)


def test_every_package_has_a_docstring_naming_only_real_modules():
    problems = []
    for pkg in ["", *_packages()]:
        init = PKG / pkg / "__init__.py"
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
        if not doc:
            problems.append(f"{init.relative_to(ROOT)} has no module docstring")
            continue
        for token in re.findall(r"(?<![\w./-])(\w+(?:/\w+)*\.py)\b", doc):
            bases = (PKG, ROOT) if "/" in token else (PKG / pkg,)
            if not any((b / token).is_file() for b in bases):
                looked = " or ".join(f"{b.relative_to(ROOT).as_posix() or '.'}/" for b in bases)
                problems.append(f"{init.relative_to(ROOT)}'s docstring names {token}, not in {looked}")
    assert not problems, "\n".join(problems)


def _imports_paddle(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module]
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
            else []
        )
        if any(n == "paddle" or n.startswith("paddle.") for n in names):
            return True
    return False


def test_each_entry_says_truly_whether_it_imports_paddle():
    problems = []
    for package, heading, _ in _sections(_text()):
        if package is None and not heading.startswith("### Top-level modules"):
            continue
        folder = PKG / package if package else PKG
        says_paddle = "imports paddle" in heading
        if says_paddle == ("Paddle-free" in heading):
            problems.append(f"{heading!r} must say either 'Paddle-free' or 'imports paddle'")
            continue
        importers = [p.relative_to(PKG).as_posix() for p in sorted(folder.glob("*.py")) if _imports_paddle(p)]
        if says_paddle and not importers:
            problems.append(f"{heading!r} says it imports paddle, but no module of paddle_xla/{package}/ does")
        if not says_paddle and importers:
            problems.append(f"{heading!r} says Paddle-free, but these import paddle: {', '.join(importers)}")
    assert not problems, "\n".join(problems)


# ---- floors: which unit may import which ----
def _floors() -> dict[str, int]:
    """unit ('graph/', 'errors.py') -> floor number, from the code block under '## Floors'."""
    text = _text()
    block = re.search(r"^## Floors\n.*?```\w*\n(.*?)```", text, re.S | re.M)
    assert block, "ARCHITECTURE.md has no '## Floors' section with a code block of 'N  unit unit ...' lines"
    out = {}
    for line in block.group(1).splitlines():
        if not line.strip():
            continue
        number, *units = line.split()
        for unit in units:
            assert unit not in out, f"{unit} is on two floors in ARCHITECTURE.md"
            out[unit] = int(number)
    return out


def _module_path(dotted: str) -> Path | None:
    """paddle_xla.a.b -> its file (a module or a package's __init__.py), or None."""
    parts = dotted.split(".")[1:]
    if (PKG.joinpath(*parts) / "__init__.py").is_file():
        return PKG.joinpath(*parts) / "__init__.py"
    if parts and PKG.joinpath(*parts[:-1], parts[-1] + ".py").is_file():
        return PKG.joinpath(*parts[:-1], parts[-1] + ".py")
    return None


def _runtime_nodes(tree: ast.AST):
    """Every node of a module, inside functions too, except under `if TYPE_CHECKING:` (never run)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for other in node.orelse:
                yield other
                yield from _runtime_nodes(other)
            continue
        yield node
        yield from _runtime_nodes(node)


def _imported_files(path: Path):
    """(the paddle_xla file each import of `path` reads, the import's dotted text)."""
    package = ".".join(("paddle_xla", *path.parent.relative_to(PKG).parts))
    for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names if a.name.split(".")[0] == "paddle_xla"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                full = ".".join(base + ([node.module] if node.module else []))
            elif node.module and node.module.split(".")[0] == "paddle_xla":
                full = node.module
            else:
                continue
            targets = [f"{full}.{a.name}" if _module_path(f"{full}.{a.name}") else full for a in node.names]
        else:
            continue
        for dotted in targets:
            while dotted and _module_path(dotted) is None:
                dotted = dotted.rpartition(".")[0]
            if dotted:
                yield _module_path(dotted), dotted


def _unit(path: Path, floors: dict[str, int]) -> str | None:
    """The floor unit a file belongs to: its deepest package on the floors, or a top-level module."""
    rel = path.relative_to(PKG)
    if len(rel.parts) == 1:
        return None if rel.name == "__init__.py" else rel.name
    for depth in range(len(rel.parts) - 1, 0, -1):
        unit = "/".join(rel.parts[:depth]) + "/"
        if unit in floors:
            return unit
    return "/".join(rel.parts[:1]) + "/"


def test_floors_name_every_unit_and_imports_never_run_up():
    floors = _floors()
    units = {p.name for p in PKG.glob("*.py") if p.name != "__init__.py"} | {f"{p}/" for p in _packages()}
    top = {u for u in units if "/" not in u.rstrip("/")}
    unlisted = sorted(top - floors.keys())
    assert not unlisted, f"put these on a floor in ARCHITECTURE.md's '## Floors' block: {', '.join(unlisted)}"
    gone = sorted(floors.keys() - units)
    assert not gone, f"ARCHITECTURE.md's floors name units that do not exist: {', '.join(gone)}"
    upward = []
    for path in sorted(PKG.rglob("*.py")):
        source = _unit(path, floors)
        if source is None:  # paddle_xla/__init__.py: runs first anyway, loads the face lazily
            continue
        for target_path, dotted in _imported_files(path):
            target = _unit(target_path, floors)
            if target is None or target == source:
                continue
            if floors[target] > floors[source]:
                upward.append(
                    f"{path.relative_to(ROOT)} (floor {floors[source]}, {source}) imports {dotted} "
                    f"(floor {floors[target]}, {target})"
                )
    assert not upward, (
        "imports that run up the floors of ARCHITECTURE.md (move the code down, or the "
        "unit up, and update the page):\n" + "\n".join(upward)
    )


def test_the_map_stays_a_ten_minute_read():
    size = len((ROOT / "ARCHITECTURE.md").read_text())
    assert size < 16_000, f"ARCHITECTURE.md is {size} characters: keep it under 16,000 (move detail to docs/)"
