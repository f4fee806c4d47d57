"""ganggate.core and kubesim compute the same things independently; random pods and nodes check
that they agree.

Two implementations written separately from the Kubernetes source (ganggate.core for planning,
ganggate.sim for the stand-in scheduler) must agree on parsed quantities, a pod's effective request
per resource and whether a node is eligible for a pod. Where they cannot, the test names the
input, what the Kubernetes source says and who is wrong (a strict xfail at the bottom, left for
the owner of the side that is wrong).

The random quantities are written in every notation the API accepts: decimal and binary suffixes
(exa and exbi included), exponents, fractions of binary units ("1.5Gi"), leading zeros and signs,
JSON numbers. Most are "whole" as the scheduler counts them (cpu in whole milli-cores, every other
resource in whole units); some are not, since the scheduler rounds a pod's exact total, not each
container (the cases at the bottom pin the inputs where ganggate.core once went wrong).
"""

from __future__ import annotations

import re
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ganggate.core.fit import nodematch
from ganggate.core.fit import resources as core
from ganggate.sim.apimachinery.quantity import QuantityError, parse_milli
from ganggate.sim.helpers import podrequests as sim
from ganggate.sim.scheduler.plugins import node_rejects

GPU = "nvidia.com/gpu"

# -- quantities: an exact amount written in a random notation --------------------------------

_DECIMAL = [("n", -9), ("u", -6), ("m", -3), ("", 0), ("k", 3), ("M", 6), ("G", 9), ("T", 12), ("P", 15), ("E", 18)]
_BINARY = [("Ki", 10), ("Mi", 20), ("Gi", 30), ("Ti", 40), ("Pi", 50), ("Ei", 60)]


def decimal_text(amount: Fraction) -> str | None:
    """`amount` as a plain decimal string ("1.5", "0.0009765625"), None if it needs > 24 digits."""
    for places in range(0, 25):
        scaled = amount * 10**places
        if scaled.denominator == 1:
            digits = str(abs(scaled.numerator)).rjust(places + 1, "0")
            text = digits if places == 0 else f"{digits[:-places]}.{digits[-places:]}"
            return ("-" if amount < 0 else "") + text
    return None


@st.composite
def notation(draw, amount: Fraction) -> str | int | float:
    """One way of writing `amount` units that the API server accepts."""
    style = draw(st.sampled_from(["decimal", "binary", "exponent", "json"]))
    if style == "json":
        if amount.denominator == 1 and draw(st.booleans()):
            return int(amount)
        as_float = float(amount)
        if Fraction(as_float) == amount:
            return as_float
        style = "decimal"
    if style == "binary":
        suffix, power = draw(st.sampled_from(_BINARY))
        mantissa, text_suffix = amount / 2**power, suffix
    elif style == "exponent":
        exponent = draw(st.integers(-12, 12))
        mantissa = amount / Fraction(10) ** exponent
        text_suffix = draw(st.sampled_from(["e", "E"])) + draw(st.sampled_from(["", "+"]) if exponent >= 0 else st.just("")) + str(exponent)
    else:
        suffix, power = draw(st.sampled_from(_DECIMAL))
        mantissa, text_suffix = amount / Fraction(10) ** power, suffix
    text = decimal_text(mantissa)
    if text is None:
        text = decimal_text(amount) or str(int(amount))
        text_suffix = ""
    if "." in text and draw(st.booleans()):
        text += "0" * draw(st.integers(1, 3))  # trailing zeros
    if draw(st.integers(0, 4)) == 0:
        text = "0" * draw(st.integers(1, 2)) + text  # leading zeros
    if draw(st.integers(0, 6)) == 0:
        text = "+" + text
    if "." not in text and draw(st.integers(0, 8)) == 0:
        text += "."  # "1." and "1.G" parse (quantity_test.go)
    return text + text_suffix


def whole_amount(resource: str) -> st.SearchStrategy[Fraction]:
    """An amount the scheduler counts without rounding: milli-cores for cpu, units otherwise."""
    if resource == "cpu":
        return st.integers(0, 256_000).map(lambda m: Fraction(m, 1000))
    if resource == GPU:
        return st.integers(0, 16).map(Fraction)
    return st.one_of(
        st.integers(0, 2**40).map(Fraction),
        st.tuples(st.integers(0, 4096), st.sampled_from([2**10, 2**20, 2**30])).map(lambda t: Fraction(t[0] * t[1])),
        st.tuples(st.integers(0, 999), st.sampled_from([10**3, 10**6, 10**9])).map(lambda t: Fraction(t[0] * t[1])),
    )


def any_amount(resource: str) -> st.SearchStrategy[Fraction]:
    """Mostly whole amounts; now and then one in nano-units (0.5m cpu, 100m bytes), which the
    scheduler rounds only once it has added up the pod."""
    return st.one_of(whole_amount(resource), whole_amount(resource),
                     st.integers(0, 3 * 10**9).map(lambda n: Fraction(n, 10**9)))


RESOURCES = ["cpu", "memory", GPU, "ephemeral-storage", "hugepages-2Mi"]


@st.composite
def resource_list(draw, names=RESOURCES) -> dict:
    chosen = draw(st.lists(st.sampled_from(names), unique=True, max_size=3))
    return {name: draw(any_amount(name).flatmap(notation)) for name in chosen}


@st.composite
def container(draw, name: str, sidecar_allowed: bool = False) -> dict:
    resources = {}
    requests, limits = draw(resource_list()), draw(resource_list())
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    out = {"name": name, "image": "x", "resources": resources}
    if sidecar_allowed and draw(st.booleans()):
        out["restartPolicy"] = "Always"
    return out


@st.composite
def pods(draw) -> dict:
    n, m = draw(st.integers(1, 3)), draw(st.integers(0, 3))
    spec: dict = {
        "containers": [draw(container(f"c{i}")) for i in range(n)],
        "initContainers": [draw(container(f"i{i}", sidecar_allowed=True)) for i in range(m)],
    }
    if draw(st.booleans()):
        spec["overhead"] = draw(resource_list(["cpu", "memory"]))
    if draw(st.integers(0, 3)) == 0:
        spec["resources"] = {"requests": draw(resource_list(["cpu", "memory", GPU]))}
    return {"metadata": {"name": "p"}, "spec": spec}


# -- nodes and node selection (only what the API server's validation lets through) ------------

KEYS = ["zone", "gpu", "example.com/rack", "cores"]
VALUES = ["a", "b", "", "10", "064", "7"]
TAINT_KEYS = ["gpu", "dedicated", "node.kubernetes.io/unschedulable"]
EFFECTS = ["NoSchedule", "PreferNoSchedule", "NoExecute"]


@st.composite
def nodes(draw, name: str = "n1") -> dict:
    labels = draw(st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=4))
    taints = draw(st.lists(
        st.fixed_dictionaries({"key": st.sampled_from(TAINT_KEYS), "effect": st.sampled_from(EFFECTS)},
                              optional={"value": st.sampled_from(["", "x", "y"])}),
        max_size=3, unique_by=lambda t: (t["key"], t["effect"])))
    spec: dict = {"taints": taints}
    if draw(st.booleans()):
        spec["unschedulable"] = draw(st.booleans())
    ready = draw(st.integers(0, 5)) > 0
    return {"metadata": {"name": name, "labels": labels}, "spec": spec,
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


label_expression = st.one_of(
    st.builds(lambda k, op, vs: {"key": k, "operator": op, "values": vs}, st.sampled_from(KEYS),
              st.sampled_from(["In", "NotIn"]), st.lists(st.sampled_from(VALUES), min_size=1, max_size=3)),
    st.builds(lambda k, op: {"key": k, "operator": op}, st.sampled_from(KEYS), st.sampled_from(["Exists", "DoesNotExist"])),
    st.builds(lambda k, op, v: {"key": k, "operator": op, "values": [v]}, st.sampled_from(KEYS),
              st.sampled_from(["Gt", "Lt"]), st.sampled_from(["5", "-3", "+7", "064", "x", "10"])),
)
field_expression = st.builds(lambda op, v: {"key": "metadata.name", "operator": op, "values": [v]},
                             st.sampled_from(["In", "NotIn"]), st.sampled_from(["n1", "n2"]))
term = st.fixed_dictionaries({}, optional={"matchExpressions": st.lists(label_expression, max_size=3),
                                           "matchFields": st.lists(field_expression, max_size=1)})
toleration = st.one_of(
    st.fixed_dictionaries({"key": st.sampled_from(TAINT_KEYS)},
                          optional={"operator": st.sampled_from(["Equal", "Exists"]), "value": st.sampled_from(["", "x"]),
                                    "effect": st.sampled_from(EFFECTS)}),
    st.fixed_dictionaries({"operator": st.just("Exists")}, optional={"effect": st.sampled_from(EFFECTS)}),
)


@st.composite
def placed_pods(draw) -> dict:
    spec: dict = {"containers": [{"name": "c", "image": "x"}]}
    if draw(st.booleans()):
        spec["nodeSelector"] = draw(st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=2))
    if draw(st.booleans()):
        terms = draw(st.lists(term, min_size=1, max_size=3))  # validation wants at least one term
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}
    tolerations = draw(st.lists(toleration, max_size=3))
    tolerations = [t for t in tolerations if not (t.get("operator") == "Exists" and t.get("value"))]  # validation
    if tolerations:
        spec["tolerations"] = tolerations
    return {"metadata": {"name": "p"}, "spec": spec}


# -- the agreement properties ----------------------------------------------------------------

ANY_AMOUNT = st.one_of(
    st.sampled_from(RESOURCES).flatmap(whole_amount),
    st.fractions(min_value=0, max_value=10**6, max_denominator=10**9),  # sub-milli amounts too
)


@settings(max_examples=600, deadline=None)
@given(text=ANY_AMOUNT.flatmap(notation))
def test_parsed_quantities_agree(text):
    assert core.parse_quantity(text) == parse_milli(text)


@settings(max_examples=600, deadline=None)
@given(text=st.text(alphabet="0123456789.+-eEinumkKMGTP ", min_size=1, max_size=10))
def test_both_accept_and_refuse_the_same_texts(text):
    try:
        expected = core.parse_quantity(text)
    except core.QuantityError:
        expected = None
    try:
        got = parse_milli(text)
    except QuantityError:
        got = None
    if expected is not None and got is not None and abs(got) > 10**30:
        return  # beyond int64 both are meaningless (kubesim saturates)
    assert expected == got


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pod=pods())
def test_effective_requests_agree(pod):
    assert core.pod_requests(pod) == sim.pod_requests(pod)


@settings(max_examples=200, deadline=None)
@given(capacity=st.none() | resource_list(), allocatable=st.none() | resource_list())
def test_node_allocatable_agrees(capacity, allocatable):
    status = {k: v for k, v in (("capacity", capacity), ("allocatable", allocatable)) if v is not None}
    node = {"metadata": {"name": "n1"}, "status": status}
    assert core.node_allocatable(node) == sim.node_allocatable(node)


@settings(max_examples=500, deadline=None)
@given(pod=placed_pods(), node=st.sampled_from(["n1", "n2"]).flatmap(nodes))
def test_node_eligibility_agrees(pod, node):
    assert nodematch.node_rejects(pod, node) == node_rejects(pod, node)


# -- inputs where ganggate.core once went wrong (each found by the properties above) ------------


def one_container_pod(*requests: dict) -> dict:
    return {"spec": {"containers": [{"name": f"c{i}", "resources": {"requests": r}} for i, r in enumerate(requests)]}}


def test_sub_milli_cpu_is_summed_exactly():
    # component-helpers resource/helpers.go addResourceList (Quantity.Add) + framework/types.go
    # Resource.Add (MilliValue): 0.5m + 0.5m + 0.5m = 1.5m -> 2m (not 1m + 1m + 1m).
    pod = one_container_pod({"cpu": "0.5m"}, {"cpu": "0.5m"}, {"cpu": "0.5m"})
    assert sim.pod_requests(pod)["cpu"] == 2
    assert core.pod_requests(pod)["cpu"] == 2


def test_memory_is_counted_in_whole_bytes():
    # framework/types.go Resource.Add: Memory += Value(). "memory: 100m" (a common typo for 100Mi)
    # is 1 byte to the scheduler, not 0.1 byte.
    pod = one_container_pod({"memory": "100m"})
    assert sim.pod_requests(pod)["memory"] == 1000
    assert core.pod_requests(pod)["memory"] == 1000


@pytest.mark.parametrize("text", [".", "-.", "+", "k", "Mi", "e3"])
def test_an_empty_number_is_zero(text):
    # apimachinery quantity.go parseQuantityString: with no digits the numerator is "0";
    # quantity_test.go TestParseQuantityString lists "." and "-." as valid.
    assert parse_milli(text) == 0
    assert core.parse_quantity(text) == 0


@pytest.mark.parametrize(("text", "milli"), [("1E", 10**21), ("12E", 12 * 10**21), ("1.01E", 101 * 10**19),
                                             ("3Ei", 3 * 2**60 * 1000), ("0Ei", 0)])
def test_the_exa_suffixes(text, milli):
    # suffix.go: "E" is in the decimal SI table (10^18) and "Ei" in the binary one (2^60);
    # quantity_test.go TestQuantityParse parses "1E", "12E", "1.01E" and "3Ei".
    assert parse_milli(text) == milli
    assert core.parse_quantity(text) == milli


def test_every_digit_of_a_long_quantity_counts():
    # quantity.go ParseQuantity rounds the exact value up to the nano (inf.RoundUp) and MilliValue
    # rounds up again: 0.10000000000000000000000000001 cpu is 101m.
    text = "0.10000000000000000000000000001"
    assert parse_milli(text) == 101
    assert core.parse_quantity(text) == 101


def test_an_empty_allocatable_is_not_replaced_by_capacity():
    # defaults.go SetDefaults_NodeStatus copies capacity only when Allocatable == nil; "{}" is an
    # empty, non-nil map, and NodeInfo.SetNode reads status.allocatable alone.
    node = {"metadata": {"name": "n1"}, "status": {"capacity": {"cpu": "8"}, "allocatable": {}}}
    assert sim.node_allocatable(node) == {}
    assert core.node_allocatable(node) == {}


# -- a corner both once got wrong in different ways: an empty number off the fast path ----------


def refused_empty_number(text: str) -> bool:
    """A number without a digit that ParseQuantity refuses: before "Pi"/"Ei" or an exponent below -9."""
    parts = re.fullmatch(r"[+-]?\.?([eEinumkKMGTP]*[+-]?[0-9]*)", text.strip())
    if parts is None:
        return False
    suffix = parts.group(1)
    if suffix in ("Pi", "Ei"):
        return True
    exponent = re.fullmatch(r"[eE]([+-]?[0-9]+)", suffix)
    return exponent is not None and int(exponent.group(1)) < -9


@pytest.mark.parametrize("text", ["Pi", "Ei", "-Ei", ".Pi", "e-10", "+.e-12"])
def test_sim_refuses_an_empty_number_off_the_fast_path(text):
    # quantity.go ParseQuantity: the fast path needs precision >= 0 (binary: 15 - len(num) -
    # exponent*3/10 - 1, negative for Pi and Ei) and scale >= Nano (decimal: an exponent of -9 or
    # more); otherwise amount.SetString(value) runs on the number as written, "" or "." here, and
    # gopkg.in/inf.v0 Dec.scan fails with "no digits read". With a digit ("0Pi", "0e-10") it is 0.
    assert refused_empty_number(text)
    with pytest.raises(core.QuantityError):
        core.parse_quantity(text)
    with pytest.raises(QuantityError):
        parse_milli(text)
