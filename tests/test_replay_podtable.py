"""The replay's pod table, kept from kubesim's change log, says what a full read of the store
says after any run of pod creates, updates and deletes (and writes of other kinds between them),
also when the change log no longer reaches back and it reads the store again; and the highest
resourceVersion of a bound pod, all the kubelet (which watches bound pods only) has to have seen."""

from __future__ import annotations

import random

import pytest

from ganggate.replay.run.observe import JOB_LABEL
from ganggate.replay.run.podtable import PodTable
from ganggate.sim.apiserver.store import Store


def pod(name: str, job: str | None, node: str = "", phase: str = "Pending") -> dict:
    labels = {JOB_LABEL: job} if job else {"app": "other"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default", "labels": labels},
            "spec": {"nodeName": node} if node else {}, "status": {"phase": phase}}


def fresh(store: Store) -> tuple:
    table = PodTable(store)
    table.sync()
    return table.listed(), table.max_rv, table.max_bound_rv, table.count, table.starting


@pytest.mark.parametrize("history", [10000, 7])
def test_the_table_agrees_with_a_full_read_after_every_change(history):
    rng = random.Random(history)
    store = Store(watch_history=history)
    table = PodTable(store)
    names: list[str] = []
    for step in range(400):
        draw = rng.random()
        if draw < 0.35 or not names:
            name = f"p-{step}"
            store.create("pods", pod(name, rng.choice(["j1", "j2", None])))
            names.append(name)
        elif draw < 0.75:
            name = rng.choice(names)
            store.update("pods", pod(name, rng.choice(["j1", "j2", None]), rng.choice(["", "n1"]),
                                     rng.choice(["Pending", "Running", "Succeeded"])))
        elif draw < 0.9:
            name = names.pop(rng.randrange(len(names)))
            store.delete("pods", "default", name)
        else:
            store.create("events", {"apiVersion": "v1", "kind": "Event", "reason": "Test",
                                        "metadata": {"name": f"c-{step}", "namespace": "default"}})
        if rng.random() < 0.3:
            table.sync()
            assert (table.listed(), table.max_rv, table.max_bound_rv, table.count, table.starting) == fresh(store)
    table.sync()
    assert (table.listed(), table.max_rv, table.max_bound_rv, table.count, table.starting) == fresh(store)
    assert table.sync() is False  # nothing changed since
