"""kubesim's nominator holds, in a scheduling cycle, exactly the room of the other nominated pods
of at least the pod's priority on their nodes (kube-scheduler's addNominatedPods), kept as sums
per priority and node: checked against adding every nominated pod one by one."""

from __future__ import annotations

import random
from collections import Counter

from ganggate.sim.scheduler.cache import ClusterCache, PodEntry
from ganggate.sim.scheduler.nominator import Nominator


def _node(name: str) -> dict:
    return {"metadata": {"name": name}, "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"}}}


def _cache(nodes: list[str]) -> ClusterCache:
    cache = ClusterCache(capacity=2)  # small: adding nodes grows the arrays
    for name in nodes:
        cache.set_node(_node(name))
    return cache


def _counted(cache: ClusterCache) -> Counter:
    """What the cache counts per node slot (no pods are bound: all of it is nominated room)."""
    out: Counter = Counter()
    for name, slot in cache.index.items():
        for resource, row in cache.resources.items():
            out[(name, resource)] = int(cache.requested[row, slot])
        out[(name, "pods")] = int(cache.pod_count[slot])
        out[(name, "nonzero")] = int(cache.nonzero_cpu[slot] + cache.nonzero_memory[slot])
    return +out


def _expected(entries: dict[str, PodEntry], cache: ClusterCache, key: str, priority: int) -> Counter:
    out: Counter = Counter()
    for other, entry in entries.items():
        if other != key and entry.priority >= priority and entry.node in cache.index:
            for resource, amount in entry.request.items():
                out[(entry.node, resource)] += amount
            out[(entry.node, "pods")] += 1
            out[(entry.node, "nonzero")] += entry.nonzero_cpu + entry.nonzero_memory
    return +out


def test_a_cycle_holds_the_other_nominated_pods_of_at_least_its_priority_and_gives_them_back() -> None:
    rng = random.Random(3)
    resources = ["cpu", "nvidia.com/gpu", "example.com/fpga"]  # the last one new to the cache when first asked
    for _ in range(100):
        cache = _cache(["a", "b", "c"])
        nominator, entries = Nominator(), {}
        for _ in range(rng.randrange(1, 12)):  # cycles, one nominator: its laid-out sums follow the changes
            for _ in range(rng.randrange(0, 8)):
                key = f"p{rng.randrange(12)}"
                if rng.random() < 0.25:
                    nominator.pop(key)
                    entries.pop(key, None)
                    continue
                request = {r: rng.randrange(0, 5) * 500 for r in rng.sample(resources, rng.randrange(1, 3))}
                entry = PodEntry(rng.choice(["a", "b", "c", "d", "gone"]), request, 100, 200, priority=rng.choice([0, 5, 10]))
                nominator[key] = entry
                entries[key] = entry
            if rng.random() < 0.2:  # a node comes or goes: the cache's slots change
                name = rng.choice(["c", "d"])
                cache.remove_node(name) if name in cache.index and rng.random() < 0.5 else cache.set_node(_node(name))
            key, priority = f"p{rng.randrange(12)}", rng.choice([0, 5, 10])
            applied = nominator.hold(cache, key, priority)
            assert _counted(cache) == _expected(entries, cache, key, priority)
            nominator[f"new-{priority}"] = PodEntry("a", {"cpu": 1}, 1, 1, priority=priority)  # (as preemption does meanwhile)
            entries[f"new-{priority}"] = nominator.get(f"new-{priority}")
            nominator.release(cache, applied)
            assert not _counted(cache)
