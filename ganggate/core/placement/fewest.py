"""Fewest domains: which domains of each level, widest first, hold a gang that one domain
of the narrowest level cannot. Pure: no I/O, no Capacity (ganggate.core.placement.topology feeds it).

The rule, as Kueue's topology-aware scheduling applies it (kubernetes-sigs/kueue
keps/2724-topology-aware-scheduling, "Computing the assignment", the BestFit algorithm): descend the levels from the widest, at each
level choosing the fewest domains (inside the ones chosen above) whose free room holds the gang.
Here the choice is lexicographic, widest level first: the fewest domains of the widest level,
then (among those choices) the fewest of the next level, down to the narrowest, then the least
room left over (waste). Where one domain of a level holds the gang every such domain is looked
at (one domain of each wider level is then the minimum), so that a block whose racks hold the
gang in two is chosen over a smaller one that needs three.

Room is a domain's free room for the gang in GPU (milli): each node's free GPU in chunks of
the gang's smallest GPU request (whole pods of it; the free GPU when requests are not multiples
of it), summed. Rooms add up, so the fewest domains of a level that hold `demand` are the k
largest for the smallest k whose rooms reach it (a set of k domains cannot hold more than the k
largest): the count at each level is exact for the scope chosen above. Which k domains:
 - at the narrowest level, the k with the least waste (then the first names), by a depth-first
   search that starts from Kueue's BestFit set (the k-1 largest, then the smallest that holds
   the rest) and prunes what cannot reach the demand or beat the best: exact within
   LEAST_WASTE_STEPS steps, the best found after that;
 - at a wider level, every set of k whose room reaches the demand when there are at most
   EXACT_SETS of them, else the BestFit set; the sets are looked into in the order of the
   fewest domains they need one level down (exact for the rooms), and of those that need
   equally few the WIDER_SETS with least room are compared for the waste below them. The
   counts are then the fewest the rooms allow at every level while the sets are compared
   exactly; the waste may not be the least where more than WIDER_SETS sets tie.
Room is an upper bound where CPU or memory bind, or for pods of several GPU sizes: the packer
then has the last word on the nodes chosen, and the caller falls back (ganggate.core.placement.topology).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import combinations
from math import comb
from typing import Any

# The most sets of domains of one wider level compared exactly for one choice (each compared by
# what it needs below it); above, greedy. The narrowest level's least-waste search is exact up
# to LEAST_WASTE_STEPS steps of its depth-first search (the best found so far after that).
EXACT_SETS = 512
LEAST_WASTE_STEPS = 4096
# Of the sets of a wider level that need equally few domains below, how many (least room
# first) are compared for the least waste below them.
WIDER_SETS = 3

Room = Callable[[int, str], int]  # (level index in the chain, domain) -> its room
Children = Callable[[int, str], Sequence[str]]  # (level index, domain) -> its domains one level down
Fits = Callable[[int, Sequence[str]], bool]  # (level index, domains) -> whether they pass a further test


@dataclass(frozen=True)
class Choice:
    """Domains used at each level of the chain (widest first), the room left over in the
    chosen domains of the narrowest level, those domains, and the chosen domains of every
    level (widest first: where to look when the packer turns the narrowest ones down)."""

    counts: tuple[int, ...]
    waste: int
    leaves: tuple[str, ...]
    levels: tuple[tuple[str, ...], ...] = ()

    def key(self) -> tuple[Any, ...]:
        return self.counts, self.waste, self.leaves


def fewest_count(rooms: Sequence[int], demand: int) -> int | None:
    """The fewest of these rooms whose sum reaches `demand` (the largest first), None if all
    of them do not."""
    total = 0
    for k, room in enumerate(sorted(rooms, reverse=True), start=1):
        total += room
        if total >= demand:
            return k
    return None if demand > 0 else 0


def choose(room: Room, children: Children, depth: int, level: int, scope: Sequence[str],
           demand: int, fits: Fits | None = None) -> Choice | None:
    """The best Choice (see the module) of domains among `scope` (domains of chain level
    `level`) and below it, down to chain level `depth - 1`; None when their rooms together do
    not reach `demand`. `fits` (level, domains): a further test a set must pass (the big
    pods' slots, for pods of several sizes); a count it rules out is followed by the next."""
    rooms = {d: room(level, d) for d in scope}
    if demand <= 0:  # no GPU asked: room is no measure; the fullest domain, the packer decides
        if not rooms:
            return None
        return _within(room, children, depth, level, (min(rooms, key=lambda d: (rooms[d], d)),), demand, rooms, fits)
    usable = sorted((d for d, r in rooms.items() if r > 0), key=lambda d: (-rooms[d], d))
    least = fewest_count([rooms[d] for d in usable], demand)
    if least is None:
        return None
    for k in range(least, len(usable) + 1 if fits is not None else least + 1):
        if level == depth - 1:  # the narrowest level: the least waste (then names) alone decides
            found_set = least_waste(usable, rooms, demand, k, None if fits is None else lambda s: fits(level, s))
            if found_set is None:
                continue
            return _within(room, children, depth, level, found_set, demand, rooms, fits)
        sets = _sets(usable, rooms, demand, k)
        if fits is not None:
            sets = [chosen for chosen in sets if fits(level, chosen)]
        best: Choice | None = None
        # Each set's fewest domains one level down (a bound on what it needs there: exact for
        # the rooms) first: sets that need more than the best found are not looked into; of
        # those that need equally few, the WIDER_SETS with least room are compared for waste.
        ranked = sorted((_fewest_below(room, children, level, chosen, demand), sum(rooms[d] for d in chosen), chosen)
                        for chosen in sets)
        tied: dict[int, int] = {}
        for below, _, chosen in ranked:
            if best is not None and below > best.counts[1]:
                break
            tied[below] = tied.get(below, 0) + 1
            if tied[below] > WIDER_SETS:
                continue
            found = _within(room, children, depth, level, chosen, demand, rooms, fits)
            if found is not None and (best is None or found.key() < best.key()):
                best = found
        if best is not None:
            return best
    return None


def _fewest_below(room: Room, children: Children, level: int, chosen: Sequence[str], demand: int) -> int:
    """The fewest domains one level below these that the rooms allow (len+1 of them: none do)."""
    rooms = [room(level + 1, child) for d in chosen for child in children(level, d)]
    found = fewest_count(rooms, demand)
    return len(rooms) + 1 if found is None else found


def _within(room: Room, children: Children, depth: int, level: int, chosen: Sequence[str], demand: int,
            rooms: dict[str, int], fits: Fits | None = None) -> Choice | None:
    """The Choice that uses exactly these domains at `level` (the best one below them)."""
    if level == depth - 1:
        leaves = tuple(sorted(chosen))
        return Choice((len(chosen),), max(0, sum(rooms[d] for d in chosen) - demand), leaves, (leaves,))
    below = [child for d in chosen for child in children(level, d)]
    found = choose(room, children, depth, level + 1, below, demand, fits)
    if found is None:
        return None
    return Choice((len(chosen), *found.counts), found.waste, found.leaves, (tuple(sorted(chosen)), *found.levels))


def least_waste(usable: Sequence[str], rooms: dict[str, int], demand: int, k: int,
                fits: Callable[[Sequence[str]], bool] | None = None) -> tuple[str, ...] | None:
    """The k domains (of `usable`, largest room first) whose rooms reach `demand` with the least
    left over (then the first names), and pass `fits`: a depth-first search over the rooms in
    order that stops a branch once it cannot reach the demand or cannot beat the best found
    (exact); after LEAST_WASTE_STEPS steps, the best found so far (at worst Kueue's greedy set,
    found first when it is the largest-first one)."""
    values = [rooms[d] for d in usable]
    count = len(values)
    prefix = [0]
    for value in values:
        prefix.append(prefix[-1] + value)
    best: list[Any] = [None]  # (sum, names, set[Any])
    steps = [0]

    def visit(start: int, picked: list[int], total: int) -> None:
        left = k - len(picked)
        if left == 0:
            if total >= demand:
                chosen = tuple(usable[i] for i in picked)
                key = (total, sorted(chosen))
                if (best[0] is None or key < best[0][:2]) and (fits is None or fits(chosen)):
                    best[0] = (total, key[1], chosen)
            return
        for i in range(start, count - left + 1):
            steps[0] += 1
            if steps[0] > LEAST_WASTE_STEPS:
                return
            if total + prefix[i + left] - prefix[i] < demand:
                return  # the largest ones left do not reach it; later ones are smaller
            smallest_after = prefix[count] - prefix[count - (left - 1)] if left > 1 else 0
            if best[0] is not None and total + values[i] + smallest_after > best[0][0]:
                continue  # even the smallest completion wastes more than the best
            visit(i + 1, picked + [i], total + values[i])

    if k > 1:  # Kueue's greedy set first: the bound that prunes the search from the start
        head = list(range(k - 1))
        rest = demand - prefix[k - 1]
        last = [i for i in range(k - 1, count) if values[i] >= rest]
        if last:
            chosen = tuple(usable[i] for i in head + [last[-1]])
            if fits is None or fits(chosen):
                best[0] = (sum(rooms[d] for d in chosen), sorted(chosen), chosen)
    visit(0, [], 0)
    return None if best[0] is None else best[0][2]


def _sets(usable: Sequence[str], rooms: dict[str, int], demand: int, k: int) -> list[tuple[str, ...]]:
    """The sets of k domains to compare: every one whose room reaches the demand when there
    are few (at most EXACT_SETS combinations), else the greedy one (largest first, the last
    the smallest that holds the rest: Kueue's BestFit)."""
    if k == 1:
        return [(d,) for d in usable if rooms[d] >= demand]
    if comb(len(usable), k) <= EXACT_SETS:
        return [s for s in combinations(usable, k) if sum(rooms[d] for d in s) >= demand]
    head = list(usable[: k - 1])
    rest = demand - sum(rooms[d] for d in head)
    last = min((d for d in usable[k - 1:] if rooms[d] >= rest), key=lambda d: (rooms[d], d))
    return [(*head, last)]
