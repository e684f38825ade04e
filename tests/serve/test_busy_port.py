"""`paddle-xla serve` on a port another server holds: refused at once, before any model loads, in one line
that names host:port and the fix."""

import socket
import subprocess
import sys
import time

from xla_flags import child_env

from .harness import ROOT


def test_a_busy_port_is_refused_first_naming_it_and_the_fix(tmp_path):
    (tmp_path / "broken.pxa").write_bytes(b"not an artifact")  # NOTE: loading it would fail differently
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen(1)
        port = other.getsockname()[1]
        start = time.monotonic()
        res = subprocess.run(
            [sys.executable, "-m", "paddle_xla.cli", "serve", str(tmp_path), "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=120,
            env=child_env(),
            cwd=ROOT,
        )
        took = time.monotonic() - start
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert res.returncode != 0, res.stdout + res.stderr
    assert len(lines) == 1 and f"127.0.0.1:{port} is already in use" in lines[0], res.stdout + res.stderr
    assert "--port N" in lines[0] and "stop the server" in lines[0] and "Traceback" not in res.stderr
    assert "loading" not in res.stdout and "broken" not in res.stdout + res.stderr, res.stdout
    assert took < 60, took


def test_a_server_that_takes_the_port_while_this_one_loads_is_named_too(tmp_path, monkeypatch, capsys):
    """Two servers bound with SO_REUSEADDR can both load (Linux refuses only the second listen): the one that
    loses says which port and the fix, in the same line, not a bare errno."""
    from paddle_xla.serve import server
    from paddle_xla.serve.settings import Settings

    with socket.socket() as other:
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        other.bind(("127.0.0.1", 0))
        port = other.getsockname()[1]

        def scan_while_the_other_starts_listening(*args):
            other.listen(1)  # NOTE: the other server finishes loading first
            return {}

        monkeypatch.setattr(server.repository, "scan", scan_while_the_other_starts_listening)
        status = server.run(str(tmp_path), Settings(port=port))
    err = capsys.readouterr().err
    assert status == 1
    assert f"127.0.0.1:{port} is already in use" in err and "--port N" in err, err
