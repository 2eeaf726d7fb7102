"""Processes by PID on Linux (``/proc``): find a process tree, find processes by command line,
end them. Orca never stops processes by name: other users' Spark and Ray may share the machine."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable
from pathlib import Path


def _stat(pid: int) -> tuple[str, int] | None:
    """Return (state, ppid) of ``pid`` from /proc, or None when it does not exist."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name is in parentheses and may contain spaces: split after the last ')'.
    fields = text[text.rfind(")") + 2 :].split()
    return fields[0], int(fields[1])


def pid_alive(pid: int) -> bool:
    """True when ``pid`` exists and is not a zombie (an exited, not yet reaped process)."""
    stat = _stat(pid)
    return stat is not None and stat[0] not in ("Z", "X")


def process_tree(pid: int) -> list[int]:
    """Return ``pid`` and all of its live descendants (Linux ``/proc``), parents first.

    Args:
        pid: the root process.

    Returns:
        The PIDs of the tree; empty when ``pid`` is gone.
    """
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _stat(int(entry))
            if stat is not None and stat[0] not in ("Z", "X"):
                children.setdefault(stat[1], []).append(int(entry))
    if not pid_alive(pid):
        return []
    out, todo = [], [pid]
    while todo:
        current = todo.pop(0)
        out.append(current)
        todo.extend(children.get(current, []))
    return out


def processes_mentioning(text: str) -> list[int]:
    """Return live PIDs whose command line contains ``text`` (e.g. a private temp dir)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if text.encode() in cmdline and pid_alive(int(entry)):
            found.append(int(entry))
    return found


def process_name(pid: int) -> str:
    """The short command name of ``pid`` (``java``, ``raylet``, ``gcs_server``), or ``""``."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def kill_pids(pids: Iterable[int], grace_s: float = 5.0) -> list[int]:
    """Send SIGTERM to ``pids``, then SIGKILL to those still alive after ``grace_s``.

    Args:
        pids: processes to end (only ones the caller started or identified as its own).
        grace_s: seconds to wait between SIGTERM and SIGKILL.

    Returns:
        The PIDs that were still alive after SIGKILL (normally empty).
    """
    pids = [p for p in dict.fromkeys(pids) if pid_alive(p)]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            pids = [p for p in pids if pid_alive(p)]
            if not pids:
                return []
            time.sleep(0.1)
    return [p for p in pids if pid_alive(p)]


def ancestor_named(name: str, pid: int | None = None, depth: int = 8) -> int | None:
    """The nearest ancestor of ``pid`` (default: this process) whose command name is ``name``.

    A Spark Python worker finds its executor's JVM this way (worker -> pyspark daemon -> java).
    """
    current = os.getpid() if pid is None else pid
    for _ in range(depth):
        stat = _stat(current)
        if stat is None or stat[1] <= 1:
            return None
        current = stat[1]
        if process_name(current) == name:
            return current
    return None
