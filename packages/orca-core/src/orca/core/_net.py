"""Network helpers shared by every part of Orca that opens a port.

A port that Orca picks now and some process binds later (a Spark master, the sync server of
rank 0, a Ray node) is drawn from *below* the kernel's ephemeral range
(``/proc/sys/net/ipv4/ip_local_port_range``, 32768-60999 by default on Linux). Ports inside
that range are what the kernel hands to every ``bind(0)`` and outgoing connection of every
process on the machine, so a port found free there can be taken by anyone before the intended
owner binds it (CI saw a Spark worker's web UI land on the port chosen for its master's web
UI). Below the range only a process that asks for that exact number can take it.
"""

from __future__ import annotations

import random
import socket
from contextlib import ExitStack

_LOWEST = 20000  # above the well-known and registered services most machines run
_RANDOM = random.SystemRandom()


def _ephemeral_floor(path: str = "/proc/sys/net/ipv4/ip_local_port_range") -> int | None:
    """The first port of the kernel's ephemeral range, or ``None`` where it cannot be read."""
    try:
        with open(path, encoding="ascii") as fh:
            return int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _bound(stack: ExitStack, host: str, port: int) -> socket.socket | None:
    sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
    try:
        sock.bind((host, port))
    except OSError:
        return None
    return sock


def find_free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """Return ``count`` distinct TCP ports on ``host`` that were free a moment ago.

    The ports lie below the kernel's ephemeral range where it leaves room (see the module
    docstring), so no ``bind(0)`` or outgoing connection of another process can take them
    before the caller binds them. Where the range starts too low, they come from ``bind(0)``.
    All sockets are held open until every port is found, so the ports differ from each other.

    Args:
        count: how many ports.
        host: the interface to probe; Orca binds only to loopback by default.

    Returns:
        ``count`` distinct port numbers.

    Examples:
        >>> a, b = find_free_ports(2)
        >>> a != b
        True
    """
    floor = _ephemeral_floor()
    with ExitStack() as stack:
        ports: list[int] = []
        if floor is not None and floor - _LOWEST >= 1000:
            for _ in range(200 * count):
                if len(ports) == count:
                    return ports
                port = _RANDOM.randrange(_LOWEST, floor)
                if port not in ports and _bound(stack, host, port) is not None:
                    ports.append(port)
        while len(ports) < count:
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((host, 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


def find_free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port on ``host`` that was free a moment ago (see :func:`find_free_ports`).

    Examples:
        >>> port = find_free_port()
        >>> 0 < port < 65536
        True
    """
    return find_free_ports(1, host)[0]
