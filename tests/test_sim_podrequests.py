"""kubesim's effective pod request, with cases from Kubernetes' own tests.

Sidecar cases: staging/src/k8s.io/component-helpers/resource/helpers_test.go (TestPodRequests,
from KEP-753's "Resources calculation for scheduling and pod admission"). Scheduler units:
pkg/scheduler/framework/types.go Resource.Add and calculateResource.
"""

from __future__ import annotations

import pytest

from ganggate.sim.apimachinery.quantity import QuantityError
from ganggate.sim.helpers import podrequests
from ganggate.sim.helpers.podrequests import node_allocatable, nonzero_requests, pod_requests, scheduling_requests

MI = 2**20 * 1000  # 1Mi in milli-units


def c(name: str, requests: dict | None = None, limits: dict | None = None, sidecar: bool = False) -> dict:
    container: dict = {"name": name, "image": "x", "resources": {}}
    if requests is not None:
        container["resources"]["requests"] = requests
    if limits is not None:
        container["resources"]["limits"] = limits
    if sidecar:
        container["restartPolicy"] = "Always"
    return container


def pod(containers: list, init: list | None = None, **spec) -> dict:
    return {"metadata": {"name": "p"}, "spec": {"containers": containers, "initContainers": init or [], **spec}}


@pytest.mark.parametrize(
    ("init", "containers", "cpu"),
    [
        # "restartable init container": a sidecar adds to the containers rather than maxing
        ([c("ri1", {"cpu": "1"}, sidecar=True)], [c("c1", {"cpu": "1"})], 2000),
        # "multiple restartable init containers": max(5, (1+2+3) + 1) = 7
        ([c("i1", {"cpu": "5"}), c("ri1", {"cpu": "1"}, sidecar=True), c("ri2", {"cpu": "2"}, sidecar=True),
          c("ri3", {"cpu": "3"}, sidecar=True)], [c("c1", {"cpu": "1"})], 7000),
        # "multiple restartable and regular init containers": init-2 runs beside ri1 and ri2: 5+1+2 = 8
        ([c("i1", {"cpu": "5"}), c("ri1", {"cpu": "1"}, sidecar=True), c("ri2", {"cpu": "2"}, sidecar=True),
          c("i2", {"cpu": "5"}), c("ri3", {"cpu": "3"}, sidecar=True)], [c("c1", {"cpu": "1"})], 8000),
        # "restartable-init, init and regular": init-1's 200 plus the sidecar's 10 = 210
        ([c("ri1", {"cpu": "10"}, sidecar=True), c("i1", {"cpu": "200"})], [c("c1", {"cpu": "100"})], 210000),
        # plain init containers: the largest one is the floor (max(2, 1+1))
        ([c("i1", {"cpu": "2"}), c("i2", {"cpu": "1"})], [c("c1", {"cpu": "1"})], 2000),
    ],
)
def test_effective_cpu_request_follows_helpers_test(init, containers, cpu):
    assert pod_requests(pod(containers, init))["cpu"] == cpu


def test_overhead_is_added_and_pods_counts_one():
    p = pod([c("c", {"cpu": "1", "memory": "1Gi"})], overhead={"cpu": "250m", "memory": "120Mi"})
    assert pod_requests(p) == {"cpu": 1250, "memory": (1024 + 120) * MI, "pods": 1000}


def test_a_limit_stands_in_for_a_missing_request():
    """SetDefaults_Pod: requests default to limits, init containers included."""
    p = pod([c("c", {"cpu": "1"}, {"cpu": "2", "nvidia.com/gpu": "4"})],
            [c("i", None, {"nvidia.com/gpu": "8"})])
    assert pod_requests(p) == {"cpu": 1000, "nvidia.com/gpu": 8000, "pods": 1000}


def test_pod_level_requests_replace_cpu_and_memory_only():
    """KEP-2837: pod-level requests override the containers' cpu/memory/hugepages, nothing else."""
    p = pod([c("c", {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}, {"nvidia.com/gpu": "1"})],
            resources={"requests": {"cpu": "3", "nvidia.com/gpu": "7"}})
    assert pod_requests(p) == {"cpu": 3000, "memory": 1024 * MI, "nvidia.com/gpu": 1000, "pods": 1000}


def test_only_unsupported_pod_level_requests_are_ignored():
    """IsPodLevelRequestsSet needs a supported resource among the pod-level requests."""
    p = pod([c("c", {"cpu": "1"})], resources={"requests": {"nvidia.com/gpu": "7"}})
    assert pod_requests(p)["cpu"] == 1000


def test_requests_are_summed_exactly_before_rounding():
    """Quantity.Add is exact; the scheduler rounds the pod's total (MilliValue for cpu)."""
    p = pod([c("a", {"cpu": "0.5m"}), c("b", {"cpu": "0.5m"}), c("c", {"cpu": "0.5m"})])
    assert pod_requests(p)["cpu"] == 2  # 1.5m rounds up to 2m, not 3 x 1m


def test_memory_is_counted_in_whole_bytes_rounded_up():
    """Resource.Add takes Value() for memory: 'memory: 100m' is one byte to the scheduler."""
    p = pod([c("c", {"memory": "100m"})])
    assert pod_requests(p)["memory"] == 1000


def test_zero_requests_are_left_out():
    assert pod_requests(pod([c("c", {"cpu": "0", "memory": "0"})])) == {"pods": 1000}


def test_a_bad_quantity_is_an_error():
    with pytest.raises(QuantityError):
        pod_requests(pod([c("c", {"cpu": "lots"})]))


# -- non-zero requests for scoring (calculateResource / getNonMissingContainerRequests) -------


def test_missing_requests_score_as_100m_and_200mi_per_container():
    assert nonzero_requests(pod([c("a"), c("b")])) == (200, 400 * MI)


def test_an_explicit_zero_is_not_missing():
    assert nonzero_requests(pod([c("a", {"cpu": "0", "memory": "0"})])) == (0, 0)


def test_defaults_fill_init_containers_and_sidecars_too():
    # the sidecar (100m default) runs beside the container (250m); the init step is 100m + 100m
    p = pod([c("c", {"cpu": "250m"})], [c("ri", None, sidecar=True), c("i")])
    assert nonzero_requests(p) == (350, 400 * MI)


def test_with_pod_level_requests_a_default_fills_only_what_nobody_names():
    """getNonMissingContainerRequests with pod-level requests: cpu is named, memory is not, so
    every container gets the memory default (and nothing for cpu)."""
    p = pod([c("a"), c("b")], resources={"requests": {"cpu": "2"}})
    assert nonzero_requests(p) == (2000, 400 * MI)


def test_scheduling_requests_is_both_at_once():
    p = pod([c("a", {"cpu": "1"}), c("b")], [c("ri", {"memory": "1Gi"}, sidecar=True)])
    assert scheduling_requests(p) == (pod_requests(p), nonzero_requests(p))


# -- node allocatable (NodeInfo.SetNode, SetDefaults_NodeStatus) ------------------------------


def test_node_allocatable_in_scheduler_units():
    node = {"status": {"allocatable": {"cpu": "7910m", "memory": "1.5Gi", "pods": "110", "nvidia.com/gpu": "8"},
                       "capacity": {"cpu": "8"}}}
    assert node_allocatable(node) == {"cpu": 7910, "memory": 1536 * MI, "pods": 110000, "nvidia.com/gpu": 8000}


def test_node_allocatable_defaults_to_capacity_only_when_unset():
    assert node_allocatable({"status": {"capacity": {"cpu": "8"}}}) == {"cpu": 8000}
    assert node_allocatable({"status": {"capacity": {"cpu": "8"}, "allocatable": {}}}) == {}


def test_supported_pod_level_resources():
    assert [n for n in ("cpu", "memory", "hugepages-2Mi", "nvidia.com/gpu", "ephemeral-storage")
            if podrequests.is_supported_pod_level_resource(n)] == ["cpu", "memory", "hugepages-2Mi"]
