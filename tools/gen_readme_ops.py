"""Regenerate the supported-ops section of README.md from the lowering registry.

    .venv/bin/python tools/gen_readme_ops.py        (tests/test_readme.py checks it is current)"""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
BEGIN, END = "<!-- ops:begin -->", "<!-- ops:end -->"


def ops_section() -> str:
    from paddle_xla.ops.registry import supported_ops
    ops = supported_ops()
    names = [o.split(".", 1)[1] if o.startswith("pd_op.") else o for o in ops]
    body = ", ".join(f"`{n}`" for n in names)
    return f"{BEGIN}\n{len(ops)} Paddle ops lower to XLA (`pd_op.` prefix omitted):\n\n{body}\n{END}"


def main(check: bool = False) -> int:
    readme = ROOT / "README.md"
    text = readme.read_text()
    new = re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _: ops_section(), text, flags=re.S)
    if check:
        return 0 if new == text else 1
    readme.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main("--check" in sys.argv))
