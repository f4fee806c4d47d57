"""The controller's picture keeps no pod or node object (issue #11): what decisions read is read
once, and what many pods repeat is one object, not one per pod."""

from __future__ import annotations

import gc
import weakref

from ganggate.core.state.cluster import ClusterState
from ganggate.core.state.pods import PodInfo
from ganggate.core.state.snapshot import make_node, make_pod


class _Obj(dict):
    """A plain API object that a weak reference can watch (a dict subclass)."""


def test_the_picture_keeps_no_pod_or_node_object() -> None:
    nodes = [_Obj(make_node(f"n{i}")) for i in range(3)]
    pods = [_Obj(make_pod(f"g-{i}", gang="g", pod_num=3, gpus=1)) for i in range(3)]
    pods.append(_Obj(make_pod("busy", gpus=2, node_name="n0", phase="Running")))
    watched = [weakref.ref(o) for o in nodes + pods]
    state = ClusterState()
    state.reset(nodes, pods)
    state.apply_pod("MODIFIED", _Obj(make_pod("busy", gpus=4, node_name="n0", phase="Running")))
    del nodes, pods
    gc.collect()
    assert [r for r in watched if r() is not None] == []
    # ... and the picture still says what the objects said.
    assert state.free("n0")["nvidia.com/gpu"] == 4000 and len(state.gangs[("default", "g")].pods) == 3
    assert state.nodes["n0"].hostname == "n0" and state.nodes["n0"].ready


def test_pods_of_one_template_share_what_they_repeat() -> None:
    a, b = (PodInfo.from_pod(make_pod(f"w-{i}", gang="w", pod_num=2, gpus=1, owner="job",
                                      node_selector={"pool": "a"})) for i in range(2))
    assert a.request is b.request and a.selection is b.selection and a.gang is b.gang
    assert a.controller_ref is b.controller_ref and a.shape is b.shape and a.gates is b.gates
    assert (a.name, b.name, a.key) == ("w-0", "w-1", "default/w-0")
    other = PodInfo.from_pod(make_pod("x", gpus=2, node_selector={"pool": "b"}))
    assert other.request != a.request and other.selection["spec"]["nodeSelector"] == {"pool": "b"}
