"""PodInfo reads a spec it has seen lately from its cache (core.pods.SpecCache): what a pod says
must not change for it. Equal specs (identity fields apart) read alike; any other spec reads
as itself, also with the same owner and gang, also when the caller changed the object in place."""

from __future__ import annotations

import copy

from ganggate.core.state.pods import PodInfo, SpecCache, spec_shape
from ganggate.core.state.snapshot import make_pod


def _gang_pod(name: str, **options) -> dict:
    return make_pod(name, gang="g", pod_num=4, gpus=1, owner="job", **options)


def test_pods_of_one_template_share_facts_apart_from_identity() -> None:
    a, b = _gang_pod("g-0"), _gang_pod("g-1")
    b["spec"]["hostname"] = "g-1"
    first, second = PodInfo.from_pod(a), PodInfo.from_pod(b)
    assert first.shape == second.shape == spec_shape(a["spec"]) == spec_shape(b["spec"])
    assert first.request is second.request and first.gpu == second.gpu == 1000


def test_a_spec_that_differs_anywhere_reads_as_itself_under_the_same_owner_and_gang() -> None:
    base = PodInfo.from_pod(_gang_pod("g-0"))
    other = _gang_pod("g-1")
    other["spec"]["containers"][0]["env"] = [{"name": "RANK", "value": "1"}]
    bigger = _gang_pod("g-2")
    bigger["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "2"
    read_other, read_bigger = PodInfo.from_pod(other), PodInfo.from_pod(bigger)
    assert read_other.shape == spec_shape(other["spec"]) != base.shape
    assert read_bigger.gpu == 2000 and read_bigger.gpu_resources == ("nvidia.com/gpu",)
    assert read_bigger.shape == spec_shape(bigger["spec"]) not in (base.shape, read_other.shape)


def test_key_order_does_not_make_another_shape() -> None:
    pod = _gang_pod("g-0", node_selector={"pool": "a", "zone": "z1"})
    reordered = copy.deepcopy(pod)
    reordered["metadata"]["name"] = "g-1"
    reordered["spec"] = dict(reversed(list(pod["spec"].items())))
    reordered["spec"]["nodeSelector"] = {"zone": "z1", "pool": "a"}
    cache = SpecCache()
    hint = ("default", "job", "g")
    assert cache.facts(pod, pod["spec"], hint) is cache.facts(reordered, reordered["spec"], hint)
    # A fresh cache (no hit possible) agrees: the shape is the canonical JSON either way.
    assert SpecCache().facts(reordered, reordered["spec"], hint).shape == spec_shape(pod["spec"])


def test_an_object_changed_in_place_is_read_anew() -> None:
    pod = make_pod("c-0", gang="changed", pod_num=2, gpus=1, owner="changed-job")  # a spec not seen before
    assert PodInfo.from_pod(pod).gpu == 1000
    pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "4"
    pod["spec"]["schedulingGates"] = []
    again = PodInfo.from_pod(pod)
    assert again.gpu == 4000 and not again.gated and again.shape == ""


def test_more_specs_than_the_cache_holds_still_read_right() -> None:
    cache = SpecCache(limit=3, per_hint=2)
    pods = [make_pod(f"p-{i}", gpus=1 + i % 8, cpu=str(1 + i % 5)) for i in range(40)]
    for pod in pods + pods[::-1]:
        facts = cache.facts(pod, pod["spec"], ("default", None, None))
        assert facts.shape == spec_shape(pod["spec"])
        assert facts.gpu == 1000 * (1 + int(pod["metadata"]["name"][2:]) % 8)
