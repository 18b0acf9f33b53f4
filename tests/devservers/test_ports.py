"""devservers.ports: a server's port is outside the kernel's ephemeral range (no client socket
can take it) and reserved for its process (no other pytest process picks it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from devservers import ports

ROOT = Path(__file__).resolve().parents[2]
#: A second process that reserves ports and holds them until its standard input closes.
HOLDER = """
import sys
from devservers import ports
print(" ".join(str(ports.free_port()) for _ in range(int(sys.argv[1]))), flush=True)
sys.stdin.read()
"""


def _outside_ephemeral(port: int) -> bool:
    low, high = ports.ephemeral_range()
    return ports.LOWEST <= port <= 65_535 and not low <= port <= high


def _holder(count: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(count)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def test_a_port_is_outside_the_ephemeral_range_and_held() -> None:
    port = ports.free_port()
    assert _outside_ephemeral(port)
    assert port in ports._held
    assert not ports._lock(port)  # this process does not hand it out twice


def test_a_cluster_port_holds_its_bus_port_too() -> None:
    port = ports.cluster_port()
    assert _outside_ephemeral(port) and _outside_ephemeral(port + ports.BUS_OFFSET)
    assert {port, port + ports.BUS_OFFSET} <= set(ports._held)


def test_two_processes_never_get_the_same_port() -> None:
    holder = _holder(300)
    try:
        assert holder.stdout is not None
        theirs = {int(p) for p in holder.stdout.readline().split()}
        ours = {ports.free_port() for _ in range(300)}
        assert len(theirs) == 300 and len(ours) == 300
        assert theirs.isdisjoint(ours)
        assert not any(ports._lock(port) for port in sorted(theirs)[:20])
    finally:
        holder.communicate("", timeout=10)


def test_the_ports_of_a_killed_process_are_free_again() -> None:
    holder = _holder(5)
    assert holder.stdout is not None
    theirs = [int(p) for p in holder.stdout.readline().split()]
    holder.kill()
    holder.communicate(timeout=10)
    try:
        assert all(ports._lock(port) for port in theirs)
    finally:
        for port in theirs:
            ports._unlock(port)
