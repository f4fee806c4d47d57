"""Room: what the domains of a chain of topology levels can give one gang, counted for its own
pods (ganggate.core.placement.fewest chooses among them; ganggate.core.placement.topology tries the choice).

A node's room is its free GPU in chunks of the gang's smallest GPU request; a domain's, the sum
over its (eligible) nodes, read from the round's DomainFree views (ordered, kept up to date as
the round takes capacity) when every node is eligible. Members asking no GPU are not counted.
Pods of several sizes also need a node slot per big pod (`Rooms.slots_fit`). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from ganggate.core.placement.capacity import Capacity
from ganggate.core.placement.domains import DomainFree, children_of, domain_free, domains, room
from ganggate.core.state.pods import PodInfo


def chunk(pods: Sequence[PodInfo]) -> int:
    """The GPU chunk a node's room is counted in for these pods: their smallest GPU request
    when every GPU request is a multiple of it (a node then holds floor(free / chunk) of its
    chunks at most), else 0 (room is the free GPU itself); 0 when none asks a GPU."""
    sizes = {p.gpu for p in pods if p.gpu > 0}
    if not sizes:
        return 0
    smallest = min(sizes)
    return smallest if all(size % smallest == 0 for size in sizes) else 0


class Rooms:
    """Room (ganggate.core.placement.fewest) of the domains of a chain of levels for one gang, from the
    round's DomainFree views (every node eligible) or from the eligible nodes themselves; and
    each domain's domains one level down."""

    def __init__(self, capacity: Capacity, chain: Sequence[str], per: int, eligible: set[str] | None) -> None:
        self.capacity, self.chain, self.per, self.eligible = capacity, list(chain), per, eligible
        self.unit = per if per > 1 else 1
        self._free: dict[int, Mapping[str, int]] = {}
        self._sizes: dict[tuple[int, int], Mapping[str, int]] = {}
        self.big: list[tuple[int, int]] = []  # (GPU size above the chunk, needed pods at least that big)

    def view(self, i: int) -> DomainFree | None:
        """The level's DomainFree view for this gang's chunk (None with eligibility)."""
        return None if self.eligible is not None else domain_free(self.capacity, self.chain[i], self.per)

    def free(self, i: int) -> Mapping[str, int]:
        found = self._free.get(i)
        if found is None:
            if self.eligible is None:
                found = domain_free(self.capacity, self.chain[i], self.per).free
            else:
                level, eligible, per = self.capacity.level, self.eligible, self.per
                found = {d: sum(room(level[n], per) for n in names if n in eligible)
                         for d, names in domains(self.capacity, self.chain[i]).items()}
            self._free[i] = found
        return found

    def slots_fit(self, i: int, chosen: Sequence[str]) -> bool:
        """Whether these domains of chain level i have, for each GPU size above the chunk, a
        node slot of at least that size for every needed pod that big (Σ floor(free / size)
        over their nodes; pods of several sizes only, see big_pods)."""
        for size, count in self.big:
            free = self._sized(i, size)
            if sum(free.get(d, 0) for d in chosen) < count:
                return False
        return True

    def _sized(self, i: int, size: int) -> Mapping[str, int]:
        key = (i, size)
        found = self._sizes.get(key)
        if found is None:
            if self.eligible is None:
                found = domain_free(self.capacity, self.chain[i], size).free
            else:
                level, eligible = self.capacity.level, self.eligible
                found = {d: sum(room(level[n], size) for n in names if n in eligible)
                         for d, names in domains(self.capacity, self.chain[i]).items()}
            self._sizes[key] = found
        return found

    def room(self, i: int, domain: str) -> int:
        return self.free(i).get(domain, 0) * self.unit

    def children(self, i: int, domain: str) -> Sequence[str]:
        return children_of(self.capacity, self.chain[i], self.chain[i + 1]).get(domain, ())

    def holders(self, i: int, demand: int) -> Iterator[tuple[int, str]]:
        """(room, domain) of the level's domains whose room reaches `demand`, least first."""
        units = -(-demand // self.unit)
        view = self.view(i)
        if view is not None:
            return ((free * self.unit, d) for free, d in view.at_least(units))
        found = sorted((free, d) for d, free in self.free(i).items() if free >= units)
        if self.eligible is not None:
            groups = domains(self.capacity, self.chain[i])
            found = [(f, d) for f, d in found if any(n in self.eligible for n in groups[d])]
        return ((free * self.unit, d) for free, d in found)


def big_pods(pods: Sequence[PodInfo], need: int, per: int) -> list[tuple[int, int]]:
    """For the `need` pods asking least GPU: each GPU size above `per` (largest first) and how
    many of them ask at least that much (each needs one node with that much free)."""
    if per <= 0 or all(p.gpu == per for p in pods):
        return []  # one GPU size (or none counted in chunks): the chunk room says it all
    sizes = sorted(p.gpu for p in pods)[:need]
    bigger = sorted({s for s in sizes if s > per}, reverse=True)
    return [(size, sum(1 for s in sizes if s >= size)) for size in bigger]
