"""Where a driver's builds go (actors/runtime/placement.py): an environment to a node of its own,
its later instances to a node that holds it while that node has a core for them, else to the
least busy node, which then holds it too; a lost node holds nothing."""
from __future__ import annotations

from magis_ray.actors.runtime.placement import EnvironmentPlacement

NODES = {"a": 1.0, "b": 1.0, "c": 1.0}


def test_environments_go_to_nodes_of_their_own_and_their_instances_follow_them():
    placement = EnvironmentPlacement()
    first = placement.choose("django", NODES)
    other = placement.choose("flask", NODES)
    assert first != other  # two environments, two nodes
    placement.finished(first)
    assert placement.choose("django", NODES) == first  # its node has a core free again: the instance goes there
    placement.held("flask", "c")  # flask's build spilled over to c: c holds it too
    assert set(placement.holders("flask")) == {other, "c"}


def test_a_busy_holder_passes_the_instance_to_the_least_busy_node_which_then_holds_it():
    placement = EnvironmentPlacement()
    nodes = [placement.choose("sympy", NODES) for _ in range(4)]
    assert set(nodes[:3]) == set(NODES)  # one instance a core: the tests spread over every node
    assert nodes[3] in NODES and sorted(placement.holders("sympy")) == sorted(NODES)
    two_cores = {"a": 2.0, "b": 1.0}
    placement = EnvironmentPlacement()
    assert [placement.choose("sympy", two_cores) for _ in range(3)] == ["a", "a", "b"]


def test_a_lost_node_holds_nothing_and_no_node_alive_places_nothing():
    placement = EnvironmentPlacement()
    node = placement.choose("astropy", NODES)
    placement.lost(node)
    assert placement.holders("astropy") == []
    alive = {n: c for n, c in NODES.items() if n != node}
    assert placement.choose("astropy", alive) in alive
    assert EnvironmentPlacement().choose("astropy", {}) is None
