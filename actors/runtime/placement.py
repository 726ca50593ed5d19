"""Where a driver's builds go: each environment to a node of its own while the cluster has nodes
to spare, and every later instance of that environment to a node that holds it while that node
has a core for it; past that, to the least busy node, which then holds the environment too (the
tests spread over every node). Pure logic; Ray
applies it (remote.py) as soft node affinity, so a busy or lost node never holds an instance up:
Ray places it elsewhere, that node builds (or fetches) the environment too, and the build's
result says so (`held`)."""
from __future__ import annotations

from collections import Counter


class EnvironmentPlacement:
    """Which nodes hold (or are building) which environment, and how many of the driver's
    instances each node was given and has not finished (a grading's instance finishes with its
    test run; a run's bench never says, so its run counts on its node from then on and later runs
    go round the nodes)."""

    def __init__(self) -> None:
        self._holders: dict[str, list[str]] = {}  # environment key -> nodes, first placed first
        self._given: Counter[str] = Counter()

    def choose(self, key: str, alive: dict[str, float]) -> str | None:
        """The node to prefer for an instance of environment `key` among the `alive` nodes (node
        -> cores; None: none is known alive): the least busy node that holds the environment, while
        it has a core for each instance given to it; else the least busy node of all (fewest
        instances, then fewest environments), which from now on counts as holding it (its build
        is on the way), so later instances of the key go there too."""
        holders = [node for node in self._holders.get(key, []) if node in alive and self._given[node] < alive[node]]
        if holders:
            node = min(holders, key=lambda n: self._given[n])
        elif alive:
            node = min(alive, key=lambda n: (self._given[n], self._environments_on(n)))
            if node not in self._holders.setdefault(key, []):
                self._holders[key].append(node)
        else:
            return None
        self._given[node] += 1
        return node

    def finished(self, chosen: str | None) -> None:
        """An instance placed by `choose` on `chosen` is done (wherever Ray ran it)."""
        if chosen is not None and self._given[chosen] > 0:
            self._given[chosen] -= 1

    def held(self, key: str, node: str) -> None:
        """A build ran on `node` for `key`: the node holds the environment now."""
        nodes = self._holders.setdefault(key, [])
        if node not in nodes:
            nodes.append(node)

    def lost(self, node: str) -> None:
        """`node` is gone: it holds nothing."""
        for nodes in self._holders.values():
            if node in nodes:
                nodes.remove(node)
        self._given.pop(node, None)

    def holders(self, key: str) -> list[str]:
        return list(self._holders.get(key, []))

    def _environments_on(self, node: str) -> int:
        return sum(node in nodes for nodes in self._holders.values())
