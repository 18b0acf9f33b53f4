"""Ports for the servers the suite and the benchmarks start: free, and kept free for them.

A port that was merely free a moment ago can be gone by the time a server binds it, for two
reasons, and each one failed a test with "Address already in use":

- the kernel's ephemeral range (``/proc/sys/net/ipv4/ip_local_port_range``, 32768-60999 by
  default) is where every outgoing connection's local port comes from, so a port in it (one
  the kernel hands out for ``bind(0)``, for one) can become some client socket's local end
  before the server starts, or while a stopped server waits to be restarted on it;
- the suite runs in several pytest processes that pick ports on their own, so two of them can
  pick the same one.

So a port here is drawn outside the ephemeral range, checked by binding it, and reserved with
an ``flock`` on a file named after it in the temporary directory. The lock is held until the
process exits (the kernel releases it even on SIGKILL), so no other process that asks here
takes the port, even while its server is stopped for an outage test. A cluster node's port
``P`` is reserved together with its bus port ``P + 10 000``.

Not for production use: a test-infrastructure helper.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import socket
import tempfile
from pathlib import Path

#: The lowest port handed out: above the registered ports most system services listen on.
LOWEST = 10_000
#: A Redis Cluster node's bus port is its port plus this.
BUS_OFFSET = 10_000
#: How many random ports are tried before giving up.
TRIES = 500

_DIR = Path(tempfile.gettempdir()) / "mailguard-ports"
#: Port -> the descriptor whose lock reserves it, kept open for the life of the process.
_held: dict[int, int] = {}


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range for outgoing connections' local ports, inclusive (Linux's default
    where it cannot be read)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32_768, 60_999


def _usable(port: int, ephemeral: tuple[int, int]) -> bool:
    return LOWEST <= port <= 65_535 and not ephemeral[0] <= port <= ephemeral[1]


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _lock(port: int) -> bool:
    """Reserve ``port`` for this process; False if another process holds it."""
    if port in _held:
        return False
    _DIR.mkdir(exist_ok=True)
    fd = os.open(_DIR / f"{port}.lock", os.O_CREAT | os.O_RDWR, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False
    _held[port] = fd
    return True


def _unlock(port: int) -> None:
    fd = _held.pop(port, None)
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)


def _reserve(*, bus: bool) -> int:
    """A port P, reserved and free, with P + BUS_OFFSET reserved and free too when ``bus``."""
    ephemeral = ephemeral_range()
    wanted = (0, BUS_OFFSET) if bus else (0,)
    for _ in range(TRIES):
        port = random.randint(LOWEST, 65_535)
        ports = [port + offset for offset in wanted]
        if not all(_usable(p, ephemeral) for p in ports):
            continue
        taken: list[int] = []
        for p in ports:
            if not _lock(p):
                break
            taken.append(p)
            if not _bindable(p):
                break
        else:
            return port
        for p in taken:
            _unlock(p)
    raise RuntimeError(
        f"no free port outside the ephemeral range {ephemeral[0]}-{ephemeral[1]} "
        f"after {TRIES} tries ({len(_held)} held by this process)"
    )


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free and stays reserved for this process until it exits.

    Use it for a server the caller starts on it (or restarts on it), or for a URL on which
    nothing must listen. Not for production code: a port is held for the process's lifetime.
    """
    return _reserve(bus=False)


def cluster_port() -> int:
    """Like :func:`free_port`, for a Redis Cluster node: its bus port P + 10 000 is reserved too."""
    return _reserve(bus=True)
