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

import ipaddress
import os
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


#: what to check when Orca's processes on several hosts cannot connect to each other
UNREACHABLE_FIX = (
    "Workers connect to each other at the address their launcher gives for their host (a Spark executor's, "
    "from SPARK_LOCAL_IP or the host's name; a Ray node's --node-ip-address): each host's name must resolve "
    "to an address the other hosts can reach (not 127.0.1.1, Debian's default /etc/hosts entry: set "
    "SPARK_LOCAL_IP=<the host's address> on each Spark worker, or fix /etc/hosts or DNS), the driver's "
    "address must be one they reach (init_orca_context(driver_host=...)), and a firewall between the hosts "
    "must let TCP through on the ports docs/clusters.md lists.")


def resolve(address: str) -> str:
    """``address`` as an IP address: a name resolved here (as this host's processes would
    resolve it), an IP address as it is; a name that does not resolve, as it is.

    Examples:
        >>> resolve("10.0.0.2")
        '10.0.0.2'
    """
    try:
        ipaddress.ip_address(address)
        return address
    except ValueError:
        pass
    try:
        return socket.gethostbyname(address)
    except OSError:
        return address


def is_loopback(address: str) -> bool:
    """True when ``address`` (an IP address, or a name resolved here) is a loopback address:
    reachable only from the machine (the network namespace) it is used on.

    Examples:
        >>> is_loopback("127.0.1.1"), is_loopback("10.0.0.2")
        (True, False)
    """
    try:
        return ipaddress.ip_address(resolve(address)).is_loopback
    except ValueError:
        return False


def route_address(host: str) -> str | None:
    """This machine's own address on its route to ``host`` (the address ``host`` reaches it at on
    a flat network), or ``None`` when there is no route. Sends nothing (a UDP socket's connect).

    Examples:
        >>> route_address("127.0.0.1")
        '127.0.0.1'
    """
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect((host, 9))
            return str(sock.getsockname()[0])
    except OSError:
        return None


def machine_id() -> str:
    """Which network stack this process runs on: ``"<host name>/<boot id>/<network namespace>"``.

    Two processes with the same id reach each other's loopback addresses; two with different ids do
    not (other machines, or network namespaces of one machine).
    """
    def read(path: str) -> str:
        try:
            with open(path, encoding="ascii") as fh:
                return fh.read().strip()
        except OSError:
            return ""

    try:
        netns = str(os.stat("/proc/self/ns/net").st_ino)
    except OSError:
        netns = ""
    return f"{socket.gethostname()}/{read('/proc/sys/kernel/random/boot_id')}/{netns}"


def check_reachable(hosts: list[str], machines: list[str], what: str = "rank") -> None:
    """Raise when a process would connect to a loopback address of another machine.

    Args:
        hosts: the address each process (``what`` 0, 1, ...) is reached at.
        machines: each process's :func:`machine_id`.
        what: how the error names a process.

    Raises:
        ConnectionError: ``hosts[j]`` is a loopback address and process ``j`` runs on another
            machine than some process ``i``, which could never reach it there; the message names
            both, the address, and the fix.
    """
    for j, (host, machine) in enumerate(zip(hosts, machines, strict=True)):
        if not is_loopback(host):
            continue
        others = [i for i, m in enumerate(machines) if m != machine]
        if others:
            i = others[0]
            at = host if resolve(host) == host else f"{host} (resolved here to {resolve(host)})"
            raise ConnectionError(
                f"Orca {what} {i} (host {machines[i].split('/')[0]}) would connect to {what} {j} (host "
                f"{machine.split('/')[0]}) at {at}, a loopback address, which on {what} {i}'s host is that "
                f"host itself: {what} {j}'s host gave its own name's address, and its name resolves to "
                f"loopback. {UNREACHABLE_FIX}")
