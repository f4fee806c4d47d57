"""Resource arithmetic against the examples of the Kubernetes documentation.

Quantities: https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/quantity/
and "Resource units in Kubernetes" (Managing Resources for Containers). Effective requests:
"Init containers — resource sharing within containers" and "Sidecar containers" (KEP-753),
as computed by PodRequests in k8s.io/component-helpers/resource/helpers.go.
"""

from __future__ import annotations

import pytest

from ganggate.core.fit.resources import (
    GPU,
    LARGEST_MILLI,
    QuantityError,
    fits,
    format_amount,
    insufficient,
    node_allocatable,
    parse_quantity,
    pod_requests,
    subtract,
)

GI = 2**30


@pytest.mark.parametrize(
    "text, milli",
    [
        ("1.5", 1500),  # 1.5 CPU
        ("0.1", 100),  # "0.1 is equivalent to 100m"
        ("500m", 500),
        ("1", 1000),
        ("1Gi", GI * 1000),
        ("1Mi", 2**20 * 1000),
        ("1e3", 1000 * 1000),
        ("1E3", 1000 * 1000),
        ("2k", 2000 * 1000),
        ("129M", 129 * 10**6 * 1000),
        ("129e6", 129 * 10**6 * 1000),  # the documentation's "129e6 == 129M"
        ("128974848", 128974848 * 1000),
        ("123Mi", 123 * 2**20 * 1000),
        ("0.1m", 1),  # below a milli-unit rounds up, as Quantity.MilliValue does
        ("+2", 2000),
        (".5", 500),
    ],
)
def test_quantities_from_the_documentation(text: str, milli: int) -> None:
    assert parse_quantity(text) == milli


def test_400m_and_0_4_cpu_are_the_same_amount() -> None:
    assert parse_quantity("400m") == parse_quantity("0.4") == parse_quantity("4e-1")


@pytest.mark.parametrize("text", ["", "abc", "1.5.5", "1 Gi", "1Gb", "0x10", "--1", "1e", "1e+", "1Ee3", "1e3Mi",
                                  "1m5", "1\n2", "１", True, None, float("inf"), float("nan")])
def test_malformed_quantities_are_refused(text: object) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)  # type: ignore[arg-type]  # not a str, on purpose: refused at run time too


def container(name: str, requests: dict | None = None, limits: dict | None = None, **extra) -> dict:
    resources = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    return {"name": name, "image": "x", "resources": resources, **extra}


def pod(containers: list[dict], init: list[dict] | None = None, overhead: dict | None = None) -> dict:
    spec: dict = {"containers": containers}
    if init:
        spec["initContainers"] = init
    if overhead:
        spec["overhead"] = overhead
    return {"metadata": {"name": "p"}, "spec": spec}


def test_containers_add_up_and_every_pod_counts_one_against_the_pod_limit() -> None:
    got = pod_requests(
        pod([container("a", {"cpu": "250m", "memory": "64Mi"}), container("b", {"cpu": "250m", "memory": "64Mi"})])
    )
    assert got == {"cpu": 500, "memory": 128 * 2**20 * 1000, "pods": 1000}


def test_a_missing_request_defaults_to_the_limit() -> None:
    # SetDefaults_Pod: GPUs are usually given as limits only; they count as requests.
    got = pod_requests(pod([container("a", {"cpu": "1"}, {"cpu": "2", GPU: "4", "memory": "1Gi"})]))
    assert got["cpu"] == 1000  # the explicit request wins over the limit
    assert got[GPU] == 4000
    assert got["memory"] == GI * 1000


def test_init_containers_count_by_their_largest_step() -> None:
    # "the highest of any particular resource request ... on all init containers is the
    # effective init request"; the pod's request is the higher of that and the app containers.
    got = pod_requests(
        pod(
            [container("app", {"cpu": "1", "memory": "1Gi"})],
            init=[container("i1", {"cpu": "2"}), container("i2", {"memory": "4Gi"})],
        )
    )
    assert got["cpu"] == 2000
    assert got["memory"] == 4 * GI * 1000


def test_sidecars_add_to_the_app_and_to_every_later_init_step() -> None:
    # KEP-753: max(sum(app) + sum(sidecars), max over init steps of step + sidecars started before it)
    init = [
        container("early", {"cpu": "2"}),  # runs before the sidecar: 2
        container("proxy", {"cpu": "1", "memory": "100Mi"}, restartPolicy="Always"),
        container("late", {"cpu": "3"}),  # runs beside the sidecar: 3 + 1 = 4
    ]
    got = pod_requests(pod([container("app", {"cpu": "1", "memory": "1Gi"})], init=init))
    assert got["cpu"] == 4000
    assert got["memory"] == (GI + 100 * 2**20) * 1000  # app + sidecar

    small_init = [container("proxy", {"cpu": "1"}, restartPolicy="Always"), container("late", {"cpu": "500m"})]
    got = pod_requests(pod([container("app", {"cpu": "2"})], init=small_init))
    assert got["cpu"] == 3000  # app + sidecar beats the init step (0.5 + 1)


def test_overhead_is_added_on_top() -> None:
    # RuntimeClass overhead example: 250m CPU and 120Mi on top of the containers.
    got = pod_requests(pod([container("a", {"cpu": "500m", "memory": "100Mi"})], overhead={"cpu": "250m", "memory": "120Mi"}))
    assert got["cpu"] == 750
    assert got["memory"] == 220 * 2**20 * 1000


def test_pod_level_requests_replace_the_containers_sum_for_cpu_and_memory() -> None:
    # KEP-2837 ("Assign Pod-level CPU and memory resources"): the scheduler uses spec.resources
    # for cpu/memory when set; extended resources such as GPUs still come from the containers.
    p = pod([container("a", {"cpu": "500m", "memory": "100Mi"}, {GPU: "2"}), container("b", {"cpu": "500m"})],
            overhead={"cpu": "100m"})
    p["spec"]["resources"] = {"requests": {"cpu": "2", "memory": "1Gi"}, "limits": {"cpu": "4"}}
    got = pod_requests(p)
    assert got["cpu"] == 2100  # pod level, plus overhead
    assert got["memory"] == GI * 1000
    assert got[GPU] == 2000


def test_fits_is_per_resource_and_names_what_is_short() -> None:
    free = {"cpu": 4000, GPU: 2000, "pods": 10000}
    assert fits({"cpu": 4000, GPU: 2000}, free)
    assert not fits({"cpu": 4001}, free)
    assert not fits({"example.com/fpga": 1000}, free)  # a resource the node lacks
    assert fits({"example.com/fpga": 0}, free)  # asking for none of it is fine
    assert insufficient({"cpu": 8000, GPU: 4000, "pods": 1000}, free) == ["cpu", GPU]
    assert subtract(free, {"cpu": 5000}) == {"cpu": -1000, GPU: 2000, "pods": 10000}


def test_node_allocatable_prefers_allocatable_over_capacity() -> None:
    node = {"status": {"capacity": {"cpu": "8"}, "allocatable": {"cpu": "7500m"}}}
    assert node_allocatable(node) == {"cpu": 7500}
    assert node_allocatable({"status": {"capacity": {"cpu": "8"}}}) == {"cpu": 8000}


def test_amounts_are_shown_in_units_people_read() -> None:
    assert format_amount(GPU, 8000) == "8"
    assert format_amount("cpu", 1500) == "1500m"
    assert format_amount("memory", 512 * GI * 1000) == "512Gi"


@pytest.mark.parametrize(("text", "sign"), [("1e99999999", 1), ("-2E999999999", -1), ("+9e1000000", 1), ("1e31", 1)])
def test_an_exponent_too_large_is_the_largest_quantity_not_a_crash(text: str, sign: int) -> None:
    # The API server accepts these (a DecimalExponent is not capped), but no int64 of the
    # scheduler holds them; parse_quantity once raised decimal.Overflow, which no caller catches
    # (the controller would die on such a pod). They saturate above every amount kept exactly.
    assert parse_quantity(text) == sign * LARGEST_MILLI
    assert LARGEST_MILLI > parse_quantity("99E") > parse_quantity("8Ei")


def test_a_node_with_an_astronomical_allocatable_is_read_and_fits_anything() -> None:
    node = {"metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "1e99999999", "memory": "1Gi"}}}
    free = node_allocatable(node)
    assert fits({"cpu": parse_quantity("1e15")}, free)


# -- where ganggate.core once parted from Kubernetes (tests/test_arithmetic_agreement.py found them)


def test_sub_milli_cpu_is_summed_before_it_is_rounded() -> None:
    # component-helpers resource/helpers.go PodRequests adds exact Quantities (addResourceList);
    # framework/types.go Resource.Add takes MilliValue() of the total: 1.5m -> 2m, not 3 x 1m.
    got = pod_requests(pod([container(f"c{i}", {"cpu": "0.5m"}) for i in range(3)]))
    assert got["cpu"] == 2
    # The same for an init step against the app, and for overhead: 0.4m + 0.4m overhead = 0.8m -> 1m.
    got = pod_requests(pod([container("a", {"cpu": "0.4m"})], overhead={"cpu": "400u"}))
    assert got["cpu"] == 1
    # A lone sub-milli request still rounds up: you asked for some, you get some.
    assert pod_requests(pod([container("a", {"cpu": "1n"})]))["cpu"] == 1


def test_memory_and_other_non_cpu_resources_count_in_whole_units() -> None:
    # Resource.Add: Memory, EphemeralStorage and scalar resources += Value(), rounded up.
    # "memory: 100m" (meant as 100Mi) is 1 byte, not 0.1 byte.
    got = pod_requests(pod([container("a", {"memory": "100m", "ephemeral-storage": "1.5", GPU: "0.5"})]))
    assert got == {"memory": 1000, "ephemeral-storage": 2000, GPU: 1000, "pods": 1000}
    # Summed exactly first: 2 x 0.5 byte is 1 byte; 3 x 0.5 byte is 2.
    assert pod_requests(pod([container("a", {"memory": "500m"}), container("b", {"memory": "500m"})]))["memory"] == 1000
    assert pod_requests(pod([container(f"c{i}", {"memory": "500m"}) for i in range(3)]))["memory"] == 2000
    # A node counts the same way (NodeInfo.SetNode: NewResource(allocatable)).
    node = {"status": {"allocatable": {"cpu": "0.5m", "memory": "1.5", GPU: "8"}}}
    assert node_allocatable(node) == {"cpu": 1, "memory": 2000, GPU: 8000}


@pytest.mark.parametrize(
    ("text", "milli"),
    [
        ("1E", 10**21),  # suffix.go: "E" is exa (10^18), not an exponent
        ("12E", 12 * 10**21),  # DecimalSI is not capped at int64
        ("1.01E", 101 * 10**19),
        ("3Ei", 3 * 2**60 * 1000),  # "Ei" is exbi (2^60)
        ("0Ei", 0),
        ("10Ei", ((1 << 63) - 1) * 1000),  # ParseQuantity caps BinarySI at max int64 units
        ("1E3", 10**6),  # "E" followed by digits is an exponent
    ],
)
def test_the_exa_and_exbi_suffixes(text: str, milli: int) -> None:
    assert parse_quantity(text) == milli


@pytest.mark.parametrize("text", [".", "-.", "+", "-", "k", "Mi", "Gi", "Ti", ".Ki", "e3", "n", "e-9", "0Pi", "0e-10"])
def test_a_number_without_digits_is_zero(text: str) -> None:
    # quantity.go parseQuantityString makes an empty numerator "0" and ParseQuantity's int64 fast
    # path returns 0; quantity_test.go TestParseQuantityString lists "." and "-." as valid.
    assert parse_quantity(text) == 0


@pytest.mark.parametrize("text", ["Pi", "Ei", "-Ei", ".Pi", "e-10", ".e-12"])
def test_a_number_without_digits_off_the_fast_path_is_refused(text: str) -> None:
    # Off the fast path (binary precision < 0 for Pi and Ei; a decimal scale below Nano),
    # ParseQuantity gives the number as written to inf.Dec.SetString, which reads no digit:
    # ErrNumeric.
    with pytest.raises(QuantityError):
        parse_quantity(text)


def test_every_digit_of_a_long_quantity_counts() -> None:
    # ParseQuantity keeps the exact value and rounds it up at the nano (inf.RoundUp), then
    # MilliValue rounds up: 0.10000000000000000000000000001 cpu is 101m (not 100m, as a
    # 28-digit decimal context would make it).
    assert parse_quantity("0.10000000000000000000000000001") == 101
    assert parse_quantity("0.1000000000000000000000000000") == 100
    assert parse_quantity("1." + "0" * 5000 + "1") == 1001  # no int() digit limit
    assert parse_quantity("1" + "0" * 5000 + "e-5000") == 1000


def test_exponents_are_read_as_int64_then_int32() -> None:
    # suffix.go interpret: strconv.ParseInt(s[1:], 10, 64), then int32(parsed).
    assert parse_quantity("1e4294967296") == 1000  # 2^32 wraps to an exponent of 0
    with pytest.raises(QuantityError):
        parse_quantity("1e9223372036854775808")  # beyond int64: ErrSuffix


def test_json_numbers_are_read_from_their_text() -> None:
    assert parse_quantity(2) == 2000
    assert parse_quantity(0.1) == 100
    assert parse_quantity(1e-7) == 1  # "1e-07": rounds up to 1m


def test_an_empty_allocatable_is_empty_only_an_unset_one_is_capacity() -> None:
    # pkg/apis/core/v1/defaults.go SetDefaults_NodeStatus: allocatable = capacity only when
    # Allocatable == nil; NodeInfo.SetNode reads status.allocatable and nothing else.
    assert node_allocatable({"status": {"capacity": {"cpu": "8"}, "allocatable": {}}}) == {}
    assert node_allocatable({"status": {"capacity": {"cpu": "8"}, "allocatable": None}}) == {"cpu": 8000}
    assert node_allocatable({"status": {}}) == {}
