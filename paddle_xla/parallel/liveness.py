"""A lost rank stops the whole job at once, with a message naming it, instead of a hang.

Why this exists: when a process of a joined group dies (kill -9, the OOM killer, a crash in C++),
the others learn it late or never. A gloo collective in flight fails with "Connection closed by
peer" deep inside XLA; a process that then exits waits for the dead one in jax.distributed's
shutdown barrier (300 s); one between collectives waits for JAX's heartbeat timeout (100 s).

So every process keeps one TCP connection to process 0, which costs nothing while all is well. The
kernel closes a dead process's sockets at once, so its peer sees end-of-file: a process that ends
on purpose says "bye" first, one that fails in Python says "fail". Process 0 tells the others which
rank was lost, and each survivor prints that and ends (exit status 1) without waiting on anything.
A checkpoint half-written at that moment is never the one read back (checkpoints are written to a
temporary file and renamed). TCP keepalive covers a host that vanishes without closing anything."""

from __future__ import annotations

import atexit
import contextlib
import os
import select
import socket
import sys
import threading
import time

KEY = "paddle_xla/liveness"
LOST_EXIT_STATUS = 1


class _State:
    failing = False  # this process is ending with an uncaught exception
    verdict: str | None = None  # why this process is stopping, once a peer is lost
    peers: dict[int, socket.socket] = {}  # process 0: rank -> connection; others: {0: connection}
    last_error = ""  # how the last connection ended, for the message
    leaving = False  # this process said goodbye: what its peers do now is not its concern
    finished: list[socket.socket] = []  # process 0: connections of ranks that said goodbye


def watch(group) -> None:
    """Start watching the group (after jax.distributed.initialize); a no-op for one process."""
    import jax
    from jax._src import distributed

    n, rank = jax.process_count(), jax.process_index()
    if n <= 1:
        return
    client = distributed.global_state.client
    if rank == 0:
        server = socket.create_server(("", 0))
        client.key_value_set(KEY, str(server.getsockname()[1]))
        threading.Thread(target=_serve, args=(server, n), name="paddle_xla-liveness", daemon=True).start()
    else:
        port = int(client.blocking_key_value_get(KEY, 60_000))
        host = (
            group.host
            if group is not None and group.coordinator
            else distributed.global_state.coordinator_address.rsplit(":", 1)[0].strip("[]")
        )
        conn = _keepalive(socket.create_connection((host, port), timeout=30))
        conn.settimeout(None)
        conn.sendall(f"hello {rank} {socket.gethostname()}\n".encode())
        _State.peers = {0: conn}
        threading.Thread(target=_follow, args=(conn, rank), name="paddle_xla-liveness", daemon=True).start()
    _install_exit_hooks(rank)


def _keepalive(conn: socket.socket) -> socket.socket:
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (("TCP_KEEPIDLE", 10), ("TCP_KEEPINTVL", 5), ("TCP_KEEPCNT", 3)):
        if hasattr(socket, name):
            conn.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)
    return conn


def _serve(server: socket.socket, n: int) -> None:
    """Process 0: accept every other rank, then wait for one to go."""
    hosts: dict[int, str] = {}
    while len(_State.peers) < n - 1:
        conn, _ = server.accept()
        _, rank, host = _readline(conn).split(" ", 2)
        _State.peers[int(rank)] = _keepalive(conn)
        hosts[int(rank)] = host
    by_conn = {c: r for r, c in _State.peers.items()}
    while by_conn:
        ready, _, _ = select.select(list(by_conn), [], [])
        for conn in ready:
            rank, said = by_conn.pop(conn), _readline(conn)
            if _State.leaving:
                return
            if said == "bye":
                # NOTE: kept open: closing it would look like this process's loss to a peer still exiting
                _State.finished.append(_State.peers.pop(rank))
                continue
            failed = said == "fail"
            _tell_others(f"{'failed' if failed else 'lost'} {rank} {hosts[rank]}")
            _stop(0, rank, hosts[rank], failed)


def _follow(conn: socket.socket, rank: int) -> None:
    """Any other process: wait for process 0's word, or its end."""
    said = _readline(conn)
    if said == "bye" or _State.leaving:
        return
    kind, lost, host = said.split(" ", 2) if said.count(" ") >= 2 else ("lost", "0", "process 0's host")
    _stop(rank, int(lost), host, kind == "failed")


def _readline(conn: socket.socket) -> str:
    """One line from a peer; "" when its end closed (or failed: the reason is kept for the message)."""
    data = b""
    while not data.endswith(b"\n"):
        try:
            chunk = conn.recv(256)
        except OSError as e:
            _State.last_error = f"{type(e).__name__}: {e}"
            return ""
        if not chunk:
            _State.last_error = "end of file"
            return ""
        data += chunk
    return data.decode().strip()


def _tell_others(message: str) -> None:
    for conn in list(_State.peers.values()):
        with contextlib.suppress(OSError):
            conn.sendall(f"{message}\n".encode())


def _stop(me: int, lost: int, host: str, failed: bool) -> None:
    import jax

    how = "failed with an error" if failed else "was lost (its process ended without finishing)"
    _State.verdict = (
        f"rank {lost} of {jax.process_count()} (on {host}) {how}. This process (rank {me}) stops now: its "
        f"collectives would wait for rank {lost} forever. Checkpoints are written atomically, so the last one "
        "saved is complete; restart the whole job (every rank) to resume from it."
    )
    seen = f" [{_State.last_error}]" if _State.last_error else ""
    print(f"paddle_xla: DistributedError: {_State.verdict}{seen}", file=sys.stderr, flush=True)
    os._exit(LOST_EXIT_STATUS)


def _install_exit_hooks(rank: int) -> None:
    previous = sys.excepthook

    def excepthook(kind, value, tb):
        _State.failing = True
        # NOTE: a collective that failed because a peer died races the watch; give the watch a moment
        # to name the lost rank (and end this process) instead of printing XLA's "Connection closed".
        deadline = time.monotonic() + 3.0
        while _State.verdict is None and time.monotonic() < deadline and _looks_like_lost_peer(value):
            time.sleep(0.05)
        previous(kind, value, tb)

    sys.excepthook = excepthook
    # NOTE: registered after jax.distributed's own shutdown hook, so it runs first (atexit is LIFO): the
    # others hear "bye" before this process waits in JAX's shutdown barrier.
    atexit.register(_say_goodbye, rank, os.getpid())


def _say_goodbye(rank: int, pid: int) -> None:
    # NOTE: a forked child (a data loader's worker, anything that forks) inherits the connection and
    # these hooks; its exit must not speak for this process.
    if os.getpid() == pid:
        _State.leaving = True
        _tell_others("bye" if not _State.failing else "fail" if rank else f"failed 0 {socket.gethostname()}")


def _looks_like_lost_peer(error: BaseException) -> bool:
    text = str(error)
    return any(s in text for s in ("Gloo", "Connection closed", "Connection reset", "UNAVAILABLE", "DEADLINE"))
