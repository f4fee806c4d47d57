"""The round's domain shortcuts (core.domains) agree with naming every node's domain outright.

placement_domain, one_node_each and the DomainFree views are worked out from the nodes' label
values and the round's take log for speed; here they are checked against domain_of on each
node and free GPUs summed afresh, on random nodes some of which miss a label.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ganggate.core.placement.capacity import Capacity
from ganggate.core.placement.domains import domain_free, domain_of, domains, one_node_each, placement_domain
from tests.test_topology import LEVELS, node, state

LABEL = st.one_of(st.none(), st.sampled_from(["x", "y"]))
HOST = "kubernetes.io/hostname"


def capacity_of(labels: list[tuple[str | None, str | None, bool]]) -> Capacity:
    """A round's Capacity over nodes n0.. with these (block, rack, has hostname label)."""
    nodes = []
    for i, (block, rack, host) in enumerate(labels):
        raw = node(f"n{i}", block, rack)
        if not host:
            del raw["metadata"]["labels"][HOST]
        nodes.append(raw)
    return Capacity.from_state(state(nodes, []))  # (state's topology levels: LEVELS)


NODES = st.lists(st.tuples(LABEL, LABEL, st.booleans()), min_size=1, max_size=8)


def narrowest_common(capacity: Capacity, names: list[str]) -> str | None:
    for level in reversed(LEVELS):
        found = {domain_of(capacity.nodes[n], level, LEVELS) for n in names}
        if len(found) == 1:
            return found.pop()
    return None


@settings(max_examples=300, deadline=None)
@given(NODES, st.data(), st.booleans())
def test_placement_domain_is_the_narrowest_domain_holding_every_node(labels, data, racks_named):
    capacity = capacity_of(labels)
    if racks_named:  # with the round's map of racks (as when a gang was placed in a rack)
        domains(capacity, LEVELS[1])
    names = sorted(capacity.nodes)
    chosen = data.draw(st.lists(st.sampled_from(names), min_size=1, max_size=6))
    placement = {f"p{i}": n for i, n in enumerate(chosen)}
    assert placement_domain(capacity, placement) == narrowest_common(capacity, chosen)


@settings(max_examples=200, deadline=None)
@given(NODES, st.sampled_from([*LEVELS, "example.com/other"]), st.booleans())
def test_one_node_each_says_whether_no_two_nodes_share_a_domain(labels, level, named_first):
    capacity = capacity_of(labels)
    if named_first:  # with the round's map of the level's domains
        domains(capacity, level)
    named = {domain_of(capacity.nodes[n], level, LEVELS) for n in capacity.nodes}
    assert one_node_each(capacity, level) == (len(named) == len(capacity.nodes))


@settings(max_examples=200, deadline=None)
@given(NODES, st.sampled_from([0, 1, 2, 4]), st.data())
def test_a_domain_view_follows_the_takes_made_after_it_was_built(labels, per, data):
    capacity = capacity_of(labels)
    names = sorted(capacity.nodes)
    level = data.draw(st.sampled_from(LEVELS[:2]))
    domain_free(capacity, level, per)  # built now, asked again after the takes
    for _ in range(data.draw(st.integers(0, 3))):  # takes, each followed by asks of some views
        for _ in range(data.draw(st.integers(0, 3))):
            name = data.draw(st.sampled_from(names))
            capacity.take(name, {"nvidia.com/gpu": 1}, data.draw(st.integers(-2, 9)))
        for other in data.draw(st.lists(st.sampled_from([0, 1, 2, 4]), max_size=2)):
            domain_free(capacity, level, other)
    view = domain_free(capacity, level, per)
    for domain, members in domains(capacity, level).items():
        free = [max(capacity.level[n], 0) for n in members]
        assert view.free[domain] == (sum(f // per for f in free) if per else sum(free))
    assert view.order == sorted((f, d) for d, f in view.free.items())
