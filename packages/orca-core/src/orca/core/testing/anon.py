"""Processes' memory as the memory tests and benchmarks read it: ``/proc/<pid>/status`` and the
peak *anonymous* resident memory (``RssAnon``: heap, Arrow and numpy buffers; not the mapped
libraries, not the page cache a share on disk is read through, not Ray's shared-memory object
store) of every process below this one, sampled from outside."""

from __future__ import annotations

import os
import threading
import time


def proc_status(pid: int | str = "self") -> dict[str, float]:
    """``VmHWM`` (peak resident set), ``RssAnon`` and ``RssFile`` (now) of a process, in MB."""
    out = {}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            key = line.split(":", 1)[0]
            if key in ("VmHWM", "RssAnon", "RssFile"):
                out[key] = int(line.split()[1]) / 1024
    return out


class AnonPeaks:
    """The peak ``RssAnon`` of every process below this one, sampled every ``every_s`` seconds.

    The kernel keeps a peak of the whole resident set (``VmHWM``: file-backed pages, the
    mapped libraries and a share on disk read through the page cache included) but none of
    the anonymous part alone, so it is sampled. From outside the workers, so that the whole
    life of each process is seen (Orca loads a worker's share before the first callback runs)
    and every system is measured the same way. The process tree (Spark's JVM and its Python
    workers, Ray's raylet and actors, torchrun's children) is re-read every ``rescan_s``.
    """

    def __init__(self, every_s: float = 0.05, rescan_s: float = 0.5) -> None:
        self.every_s, self.rescan_s = every_s, rescan_s
        self.peaks: dict[int, float] = {}
        #: each process's command line, read when it is first seen
        self.commands: dict[int, str] = {}
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="anon-peaks", daemon=True)

    def __enter__(self) -> AnonPeaks:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def peak_mb(self, pid: int) -> float | None:
        """The highest ``RssAnon`` seen of ``pid``, in MB (None: never seen)."""
        return self.peaks.get(int(pid))

    def peak_of(self, command: str) -> float | None:
        """The highest ``RssAnon`` seen of the processes whose command line holds ``command``, in MB."""
        peaks = [mb for pid, mb in self.peaks.items() if command in self.commands.get(pid, "")]
        return max(peaks) if peaks else None

    def _run(self) -> None:
        root, pids, next_scan = os.getpid(), [], 0.0
        while not self._stop.wait(self.every_s):
            now = time.monotonic()
            if now >= next_scan:
                pids, next_scan = descendants(root), now + self.rescan_s
            for pid in pids:
                try:
                    with open(f"/proc/{pid}/status") as fh:
                        text = fh.read()
                except OSError:
                    continue
                i = text.find("RssAnon:")
                if i >= 0:
                    if pid not in self.commands:
                        self.commands[pid] = _command(pid)
                    mb = int(text[i + 8:text.index("kB", i)]) / 1024
                    if mb > self.peaks.get(pid, 0.0):
                        self.peaks[pid] = mb
            self.samples += 1


def _command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def descendants(root: int) -> list[int]:
    """The pids of every process below ``root`` (children, theirs, ...)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])  # (the command may hold spaces)
        children.setdefault(ppid, []).append(int(name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        for c in children.get(pid, []):
            out.append(c)
            todo.append(c)
    return out
