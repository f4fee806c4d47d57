"""The controller keeps its picture of the cluster out of the garbage collector's way
(controller/round/collector.py): no full collection of the collector's own accord while it runs,
frozen once listed, what the watch and the rounds leave alive frozen after rounds, and
everything collected once an hour, cycles that died after being frozen too."""

from __future__ import annotations

import gc
import weakref
from typing import Any

from ganggate.controller.round.collector import NO_FULL_COLLECTIONS, Collector
from tests.controller_support import create_pods, e2e_cluster, gang_pod, wait_for


class _Cycle:
    def __init__(self) -> None:
        self.me: Any = self


def test_a_settle_freezes_what_survived_and_the_full_collection_frees_cycles_that_died_frozen() -> None:
    gc.unfreeze()
    now = [0.0]
    collector = Collector(settle_seconds=1.0, full_seconds=3600.0, clock=lambda: now[0])
    try:
        cycle = _Cycle()
        alive = weakref.ref(cycle)
        collector.settle()
        assert gc.get_freeze_count() > 0 and collector.frozen == 1
        del cycle  # garbage now, but frozen: an ordinary full collection does not walk it
        gc.collect()
        assert alive() is not None
        now[0] = 0.5
        collector.settle()  # within a second of the last: nothing done
        assert collector.frozen == 1
        now[0] = 1.5
        collector.settle()
        assert collector.frozen == 2 and collector.full_collections == 0 and alive() is not None
        now[0] = 3600.0
        collector.settle()  # an hour on: everything collected, then frozen again
        assert collector.full_collections == 1 and alive() is None
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()  # (the rest of the test session as it was)


def test_every_thousand_changes_the_young_generations_are_collected_and_what_survived_frozen() -> None:
    gc.unfreeze()
    collector = Collector(churn_changes=3)
    try:
        died_young = _Cycle()
        gone = weakref.ref(died_young)
        del died_young
        kept = _Cycle()
        collector.churned()
        collector.churned()
        assert collector.frozen == 0 and gone() is not None  # not yet: two changes
        collector.churned()
        assert collector.frozen == 1 and gone() is None  # the cycle that died young freed
        assert gc.get_freeze_count() > 0 and not any(o is kept for o in gc.get_objects())  # kept: frozen
        collector.churned()
        assert collector.frozen == 1  # the count starts again
    finally:
        gc.unfreeze()


async def test_the_controller_freezes_its_picture_after_the_initial_list_and_after_rounds(tmp_path: Any) -> None:
    gc.unfreeze()
    thresholds = gc.get_threshold()
    try:
        async with e2e_cluster(tmp_path, nodes=2, gpus_per_node=8) as env:
            controller, _ = await env.start_controller()
            await wait_for(lambda: _true(controller.synced), what="the controller's initial list")
            assert gc.get_freeze_count() > 0  # the listed nodes and pods, out of the collector's way
            # While it runs, no full collection of the collector's own accord; the young ones as always.
            assert gc.get_threshold() == (*thresholds[:2], NO_FULL_COLLECTIONS)
            listed = controller.collector.frozen
            assert listed >= 1
            await create_pods(env.core, [gang_pod(f"w-{i}", "job", 2, gpus=4) for i in range(2)])

            async def released() -> bool:
                pods = await env.pods("default")
                return len(pods) == 2 and all(p["spec"].get("nodeName") for p in pods)

            await wait_for(released, what="the gang released and bound")
            await wait_for(lambda: _true(controller.collector.frozen > listed), what="a settle after a round")
        assert gc.get_threshold() == thresholds  # stopped: the process's thresholds as they were
        assert gc.get_freeze_count() == 0  # and nothing left frozen
    finally:
        gc.unfreeze()


async def _true(value: bool) -> bool:
    return value
