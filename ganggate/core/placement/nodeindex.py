"""NodeIndex: the nodes eligible for one pod constraint, bucketed by free GPU, each bucket sorted
by (free cpu, free memory, name), so that best fit is a bisect and a short scan. Capacity
(capacity.py) keeps one per constraint and moves a node between buckets as a round takes room."""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, TypeVar

from ganggate.core.fit.resources import CPU, MEMORY

if TYPE_CHECKING:
    from _typeshed import SupportsRichComparison

_T = TypeVar("_T", bound="SupportsRichComparison")

#: How many items `sorted_in_steps` sorts in one call.
SORT_STEP = 2000


def sorted_in_steps(items: Iterable[_T], step: int = SORT_STEP) -> list[_T]:
    """sorted(items), the same list, made without holding the GIL long: one sort of 20,000
    tuples is a single C call of 10-30 ms, and while a round plans in a worker thread the event
    loop waits for the GIL that long (bench/bench_loop_stall.py). Runs of `step` items sorted
    apart (each a short C call), then merged by heapq.merge, which is Python and hands the GIL
    on; merge is stable, so equal items keep their order as sorted() keeps them."""
    out = list(items)
    if len(out) <= step:
        out.sort()
        return out
    runs = [sorted(out[start:start + step]) for start in range(0, len(out), step)]
    return list(heapq.merge(*runs))


class NodeIndex:
    """Nodes eligible for one pod constraint, bucketed by free GPU; each bucket sorted by
    (free cpu, free memory, name), so best fit is a bisect and a short scan."""

    def __init__(self) -> None:
        self.members: set[str] = set()
        self.levels: list[int] = []
        self.buckets: dict[int, list[tuple[int, int, str]]] = {}

    def move(self, old: tuple[int, int, str], old_level: int, new: tuple[int, int, str], new_level: int) -> None:
        """Re-file one node whose free capacity changed: its (cpu, memory, name) entry and
        GPU level before and after (Capacity.take works them out once for all its indexes)."""
        bucket = self.buckets[old_level]
        del bucket[bisect.bisect_left(bucket, old)]
        if not bucket:
            del self.buckets[old_level]
            del self.levels[bisect.bisect_left(self.levels, old_level)]
        arrived = self.buckets.get(new_level)
        if arrived is None:
            self.buckets[new_level] = [new]
            bisect.insort(self.levels, new_level)
        else:
            bisect.insort(arrived, new)

    def move_many(self, moves: list[tuple[tuple[int, int, str], int, tuple[int, int, str], int]]) -> None:
        """move() for several distinct nodes at once: a bucket loses the entries leaving it
        in one slice when they sit side by side (best fit takes them so), and gains the
        arriving ones in one slice when nothing lies between them: fewer shifts of long lists."""
        if len(moves) == 1:
            self.move(*moves[0])
            return
        leaving: dict[int, list[tuple[int, int, str]]] = {}
        arriving: dict[int, list[tuple[int, int, str]]] = {}
        for old, old_level, new, new_level in moves:
            leaving.setdefault(old_level, []).append(old)
            arriving.setdefault(new_level, []).append(new)
        for level, entries in leaving.items():
            bucket = self.buckets[level]
            entries.sort()
            start = bisect.bisect_left(bucket, entries[0])
            if bucket[start:start + len(entries)] == entries:
                del bucket[start:start + len(entries)]
            else:
                for entry in entries:
                    del bucket[bisect.bisect_left(bucket, entry)]
            if not bucket:
                del self.buckets[level]
                del self.levels[bisect.bisect_left(self.levels, level)]
        for level, entries in arriving.items():
            found = self.buckets.get(level)
            entries.sort()
            if found is None:
                self.buckets[level] = entries
                bisect.insort(self.levels, level)
                continue
            at = bisect.bisect_left(found, entries[0])
            if at == len(found) or entries[-1] < found[at]:
                found[at:at] = entries
            else:
                for entry in entries:
                    bisect.insort(found, entry)

    def fill(self, names: Iterable[str], free: Mapping[str, Mapping[str, int]], level: Mapping[str, int]) -> None:
        """Add many nodes at once (one sort per bucket instead of an insort per node)."""
        added: dict[int, list[tuple[int, int, str]]] = {}
        names = list(names)
        self.members.update(names)
        for name in names:
            f = free[name]
            entry = (f.get(CPU, 0), f.get(MEMORY, 0), name)
            if (entries := added.get(lv := level[name])) is None:
                added[lv] = [entry]
            else:
                entries.append(entry)
        for lv, entries in added.items():
            bucket = self.buckets.get(lv)
            if bucket is None:
                self.buckets[lv] = sorted(entries)
                bisect.insort(self.levels, lv)
            else:
                bucket.extend(entries)
                bucket.sort()

    def room_for(self, gpu: int) -> int:
        """Upper bound of the pods of `gpu` GPUs that fit: sum of floor(free / gpu)."""
        start = bisect.bisect_left(self.levels, gpu)
        return sum(len(self.buckets[lv]) * (lv // gpu) for lv in self.levels[start:])
