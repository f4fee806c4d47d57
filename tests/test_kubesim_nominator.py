"""kubesim's nominator holds, in a scheduling cycle, exactly the room of the other nominated pods
of at least the pod's priority on their nodes (kube-scheduler's addNominatedPods), kept as sums
per priority and node: checked against adding every nominated pod one by one."""

from __future__ import annotations

import random
from collections import Counter

from ganggate.sim.scheduler.cache import PodEntry
from ganggate.sim.scheduler.nominator import Nominator


class _Cache:
    """What a ClusterCache's apply_sum would count, per node slot."""

    def __init__(self, nodes: list[str]) -> None:
        self.index = {name: slot for slot, name in enumerate(nodes)}
        self.counted: Counter = Counter()

    def apply_sum(self, request, pods, nonzero_cpu, nonzero_memory, slot, sign) -> None:
        for resource, amount in request.items():
            self.counted[(slot, resource)] += sign * amount
        self.counted[(slot, "pods")] += sign * pods
        self.counted[(slot, "nonzero")] += sign * (nonzero_cpu + nonzero_memory)


def _expected(entries: dict[str, PodEntry], cache: _Cache, key: str, priority: int) -> Counter:
    out: Counter = Counter()
    for other, entry in entries.items():
        slot = cache.index.get(entry.node)
        if other != key and entry.priority >= priority and slot is not None:
            for resource, amount in entry.request.items():
                out[(slot, resource)] += amount
            out[(slot, "pods")] += 1
            out[(slot, "nonzero")] += entry.nonzero_cpu + entry.nonzero_memory
    return out


def test_a_cycle_holds_the_other_nominated_pods_of_at_least_its_priority_and_gives_them_back() -> None:
    rng = random.Random(3)
    for _ in range(200):
        cache = _Cache(["a", "b", "c"])
        nominator, entries = Nominator(), {}
        for _ in range(rng.randrange(1, 30)):
            key = f"p{rng.randrange(12)}"
            if rng.random() < 0.25:
                nominator.pop(key)
                entries.pop(key, None)
                continue
            entry = PodEntry(rng.choice(["a", "b", "c", "gone"]), {"cpu": rng.randrange(1, 9) * 500,
                             "nvidia.com/gpu": rng.randrange(0, 3) * 1000}, 100, 200, priority=rng.choice([0, 5, 10]))
            nominator[key] = entry
            entries[key] = entry
        key, priority = f"p{rng.randrange(12)}", rng.choice([0, 5, 10])
        applied = nominator.hold(cache, key, priority)
        assert +cache.counted == +_expected(entries, cache, key, priority)
        nominator[f"new-{priority}"] = PodEntry("a", {"cpu": 1}, 1, 1, priority=priority)  # (as preemption does meanwhile)
        nominator.release(cache, applied)
        assert not +cache.counted and not -cache.counted
