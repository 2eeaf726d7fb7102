"""Network helpers shared by every part of Orca that opens a port."""

from __future__ import annotations

import socket


def find_free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port on ``host`` that was free a moment ago.

    The port is found by binding port 0 and closing the socket, so another process may take
    it before the caller binds it; callers that can retry on ``EADDRINUSE`` should.

    Args:
        host: the interface to probe; Orca binds only to loopback by default.

    Returns:
        A port number in the ephemeral range.

    Example:
        >>> port = find_free_port()
        >>> 0 < port < 65536
        True
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def find_free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """Return ``count`` distinct TCP ports on ``host`` that were free a moment ago.

    All sockets are held open until every port is found, so the ports differ from each other
    (the same caveat as :func:`find_free_port` applies against other processes).

    Example:
        >>> a, b = find_free_ports(2)
        >>> a != b
        True
    """
    socks = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(sock)
            sock.bind((host, 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for sock in socks:
            sock.close()
