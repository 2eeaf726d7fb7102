"""Local-first placement: each Ray actor reads the parts held on its own node where it can.

When Ray runs on the Spark executors (Ray-on-Spark), a DataFrame's partitions land in the
object store of the Ray node on the executor that computed them. Each worker still gets
exactly the number of rows ``np.array_split`` gives it (the lock-step plan depends on it),
but the rows come from its own node first; only what a node lacks crosses nodes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from orca.core.engine.feed import Slice, split_sizes


@dataclass
class Placement:
    """Where a call's data was read, for diagnostics and tests.

    Attributes:
        actor_nodes: the Ray node of each rank.
        rows_by_node: rows of the data held on each node.
        local_rows: rows a worker read from its own node.
        remote_rows: rows that crossed nodes.
        crossed_bytes: bytes that crossed nodes (from the objects' sizes, pro rata by rows).
        total_bytes: bytes of all the parts.
        order: for each rank, ``(global first row, rows)`` of each of its slices, in order.
    """

    actor_nodes: list[str | None]
    rows_by_node: dict[str, int] = field(default_factory=dict)
    local_rows: int = 0
    remote_rows: int = 0
    crossed_bytes: int = 0
    total_bytes: int = 0
    order: list[list[tuple[int, int]]] = field(default_factory=list)

    def min_remote_rows(self) -> int:
        """The fewest rows that must cross nodes for these targets (what local-first achieves)."""
        targets = split_sizes(sum(self.rows_by_node.values()), len(self.actor_nodes))
        want: dict[str | None, int] = {}
        for node, n in zip(self.actor_nodes, targets, strict=True):
            want[node] = want.get(node, 0) + n
        # a worker on an unknown node reads everything from elsewhere
        return sum(n if node is None else max(0, n - self.rows_by_node.get(node, 0)) for node, n in want.items())


def local_first_slices(parts: Sequence[tuple[Any, int, str | None, int]], actor_nodes: Sequence[str | None]
                       ) -> tuple[list[list[Slice]], Placement]:
    """Cut ``parts`` into one share per worker, each as large as ``np.array_split`` makes it, taking
    rows from the worker's own node first.

    Args:
        parts: ``(ref, rows, node id or None, bytes)`` per part, in data order.
        actor_nodes: the node of each rank (``None``: unknown).

    Returns:
        The slices of each rank and the :class:`Placement` they make.
    """
    world = len(actor_nodes)
    need = split_sizes(sum(p[1] for p in parts), world)
    out: list[list[Slice]] = [[] for _ in range(world)]
    placement = Placement(actor_nodes=list(actor_nodes), order=[[] for _ in range(world)])
    starts, offset = [], 0
    for _, n, node, size in parts:
        starts.append(offset)
        offset += n
        placement.total_bytes += size
        if node is not None:
            placement.rows_by_node[node] = placement.rows_by_node.get(node, 0) + n
    ranks_on: dict[str, list[int]] = {}
    for rank, node in enumerate(actor_nodes):
        if node is not None:
            ranks_on.setdefault(node, []).append(rank)

    def take(rank: int, i: int, lo: int, hi: int) -> None:
        ref, n, node, size = parts[i]
        out[rank].append((ref, lo, hi))
        placement.order[rank].append((starts[i] + lo, hi - lo))
        need[rank] -= hi - lo
        if node is not None and node == actor_nodes[rank]:
            placement.local_rows += hi - lo
        else:
            placement.remote_rows += hi - lo
            placement.crossed_bytes += size * (hi - lo) // max(n, 1)

    left: list[tuple[int, int]] = []  # (part index, first row not taken yet)
    for i, (_, n, node, _) in enumerate(parts):
        pos = 0
        for rank in ranks_on.get(node, []) if node is not None else []:
            step = min(need[rank], n - pos)
            if step > 0:
                take(rank, i, pos, pos + step)
                pos += step
        if pos < n:
            left.append((i, pos))
    rank = 0
    for i, pos in left:
        n = parts[i][1]
        while pos < n:
            while need[rank] == 0:
                rank += 1
            step = min(need[rank], n - pos)
            take(rank, i, pos, pos + step)
            pos += step
    return out, placement


def plan_actor_nodes(nodes: Sequence[tuple[str, float]], workers: int, cpus: int) -> list[str] | None:
    """Spread ``workers`` actors of ``cpus`` CPUs each over ``nodes`` (``(id, free CPUs)``), one
    node after another in turn; ``None`` when they do not fit that way."""
    room = {node: int(free // cpus) for node, free in nodes}
    order = [node for node, _ in nodes]
    plan: list[str] = []
    while len(plan) < workers:
        placed = False
        for node in order:
            if len(plan) < workers and room[node] > 0:
                plan.append(node)
                room[node] -= 1
                placed = True
        if not placed:
            return None
    return plan
