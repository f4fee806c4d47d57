"""Pure pieces of kubesim's API server: patches, selectors, continue tokens, path parsing,
validation helpers and the Status shapes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ganggate.sim.apimachinery import errors
from ganggate.sim.apimachinery.selectors import make_predicate, parse_field_selector, parse_label_selector
from ganggate.sim.apiserver.discovery import human_duration
from ganggate.sim.apiserver.patch import apply_patch, merge_patch, strategic_merge
from ganggate.sim.apiserver.requests import decode_continue, encode_continue, parse_bool, parse_target
from ganggate.sim.apiserver.validation import qualified_name_errors, validate_pod_update


def test_merge_patch_rfc7386():
    assert merge_patch({"a": 1, "b": {"c": 2, "d": 3}}, {"b": {"c": None, "e": 4}, "f": [1]}) == {
        "a": 1, "b": {"d": 3, "e": 4}, "f": [1]}
    assert merge_patch({"a": [1, 2]}, {"a": [3]}) == {"a": [3]}


def test_strategic_merge_lists_by_key_and_directives():
    original = {"spec": {
        "containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "1"}],
        "tolerations": [{"key": "x"}],
        "schedulingGates": [{"name": "g1"}, {"name": "g2"}],
    }, "metadata": {"finalizers": ["f1"]}}
    patched = strategic_merge(original, {"spec": {
        "containers": [{"name": "b", "image": "2"}, {"name": "c", "image": "3"}],
        "tolerations": [{"key": "y"}],
        "schedulingGates": [{"name": "g1", "$patch": "delete"}],
    }, "metadata": {"finalizers": ["f2"]}})
    assert patched["spec"]["containers"] == [{"name": "a", "image": "1"}, {"name": "b", "image": "2"}, {"name": "c", "image": "3"}]
    assert patched["spec"]["tolerations"] == [{"key": "y"}]
    assert patched["spec"]["schedulingGates"] == [{"name": "g2"}]
    assert patched["metadata"]["finalizers"] == ["f1", "f2"]
    assert original["spec"]["containers"][1]["image"] == "1"  # the original is not mutated
    replaced = strategic_merge({"spec": {"nodeSelector": {"a": "1"}}}, {"spec": {"nodeSelector": {"$patch": "replace", "b": "2"}}})
    assert replaced["spec"]["nodeSelector"] == {"b": "2"}
    retained = strategic_merge({"s": {"a": 1, "b": 2}}, {"s": {"$retainKeys": ["b"], "b": 3}})
    assert retained == {"s": {"b": 3}}
    removed = strategic_merge({"m": {"finalizers": ["a", "b"]}}, {"m": {"$deleteFromPrimitiveList/finalizers": ["a"]}})
    assert removed == {"m": {"finalizers": ["b"]}}
    conditions = strategic_merge({"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
                                 {"status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "X", "status": "True"}]}})
    assert conditions["status"]["conditions"] == [{"type": "Ready", "status": "False"}, {"type": "X", "status": "True"}]


def test_strategic_merge_item_without_its_merge_key_is_bad_request():
    with pytest.raises(errors.ApiError) as info:
        strategic_merge({"spec": {"containers": []}}, {"spec": {"containers": [{"image": "x"}]}})
    assert info.value.code == 400


def test_patch_content_types():
    with pytest.raises(errors.ApiError) as info:
        apply_patch("application/apply-patch+yaml", {}, {})
    assert info.value.code == 415
    with pytest.raises(errors.ApiError) as info:
        apply_patch("application/json-patch+json", {}, {"not": "a list"})
    assert info.value.code == 400
    assert apply_patch("application/merge-patch+json; charset=utf-8", {"a": 1}, {"a": 2}) == {"a": 2}


@given(st.dictionaries(st.text(min_size=1, max_size=5), st.one_of(st.integers(), st.text(max_size=5)), max_size=5),
       st.dictionaries(st.text(min_size=1, max_size=5), st.one_of(st.none(), st.integers()), max_size=5))
def test_merge_patch_properties(original, patch):
    result = merge_patch(original, patch)
    for key, value in patch.items():
        assert (key not in result) if value is None else result[key] == value
    for key, value in original.items():
        if key not in patch:
            assert result[key] == value


def test_label_selector_parsing():
    reqs = parse_label_selector("a=b, c!=d,e in (x, y),f notin (z),g,!h")
    assert [(r.key, r.operator, r.values) for r in reqs] == [
        ("a", "=", ("b",)), ("c", "!=", ("d",)), ("e", "in", ("x", "y")), ("f", "notin", ("z",)),
        ("g", "exists", ()), ("h", "!", ())]
    with pytest.raises(errors.ApiError) as info:
        parse_label_selector("a b c")
    assert info.value.code == 400


def test_field_selector_labels_per_resource():
    assert parse_field_selector("spec.nodeName=n1,status.phase!=Running", "pods")
    assert parse_field_selector("spec.unschedulable=false", "nodes")
    with pytest.raises(errors.ApiError) as info:
        parse_field_selector("spec.nodeName=x", "nodes")
    assert info.value.message == "field label not supported: spec.nodeName"
    predicate = make_predicate("app=x", "spec.nodeName=", "pods")
    assert predicate({"metadata": {"labels": {"app": "x"}}, "spec": {}})
    assert not predicate({"metadata": {"labels": {"app": "x"}}, "spec": {"nodeName": "n"}})
    assert make_predicate("", None, "pods") is None


def test_continue_tokens_round_trip_and_reject_garbage():
    token = encode_continue(42, ("default", "pod-7"))
    assert decode_continue(token) == (42, ("default", "pod-7"))
    with pytest.raises(errors.ApiError) as info:
        decode_continue("!!!")
    assert info.value.code == 400


def test_parse_target_and_bool():
    target = parse_target("", "v1", ["namespaces", "ns1", "pods", "p", "binding"])
    assert (target.info.plural, target.namespace, target.name, target.subresource) == ("pods", "ns1", "p", "binding")
    ns_status = parse_target("", "v1", ["namespaces", "ns1", "status"])
    assert (ns_status.info.plural, ns_status.name, ns_status.subresource) == ("namespaces", "ns1", "status")
    for bad in (["pods", "x"], ["widgets"], ["namespaces", "a", "pods", "p", "logs"]):
        with pytest.raises(errors.ApiError) as info:
            parse_target("", "v1", bad)
        assert info.value.code == 404
    assert parse_bool("True") and parse_bool("1") and not parse_bool("false") and not parse_bool(None)


def test_qualified_names():
    assert qualified_name_errors("scheduling.k8s.io/group-gate") == []
    assert qualified_name_errors("plain") == []
    assert qualified_name_errors("a/b/c")
    assert qualified_name_errors("/x")
    assert qualified_name_errors("Bad_Prefix/x")
    assert qualified_name_errors("x" * 64)


def test_pod_update_without_changes_is_valid():
    pod = {"metadata": {"name": "p", "namespace": "d"},
           "spec": {"containers": [{"name": "c", "image": "i"}], "restartPolicy": "Always",
                    "schedulingGates": [{"name": "a/b"}]}}
    assert validate_pod_update(pod, pod) == []


def test_a_pod_update_is_judged_without_changing_either_pod():
    """The updatable fields are munged back to their old values on a copy: neither pod changes,
    a gate removal with an added nodeSelector passes, a changed image passes, a changed command does not."""
    import copy

    old = {"metadata": {"name": "p", "namespace": "d"},
           "spec": {"containers": [{"name": "c", "image": "i", "command": ["a"]}], "restartPolicy": "Always",
                    "schedulingGates": [{"name": "a/b"}], "tolerations": [{"key": "k", "operator": "Exists"}],
                    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [{"key": "z", "operator": "In", "values": ["1"]}]}]}}}}}
    released = copy.deepcopy(old)
    released["spec"].pop("schedulingGates")
    released["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "n1"}
    released["spec"]["containers"][0]["image"] = "j"
    released["spec"]["tolerations"].append({"key": "t", "operator": "Exists"})
    before_old, before_new = copy.deepcopy(old), copy.deepcopy(released)
    assert validate_pod_update(released, old) == []
    assert (old, released) == (before_old, before_new)
    changed = copy.deepcopy(released)
    changed["spec"]["containers"][0]["command"] = ["b"]
    causes = validate_pod_update(changed, old)
    assert [c.field for c in causes] == ["spec"] and "may not change fields" in causes[0].message
    assert changed["spec"]["containers"][0]["image"] == "j"


def test_status_shapes():
    status = errors.invalid("Pod", "p", [errors.forbidden("spec", "no"), errors.required("spec.x")]).status()
    assert status["message"] == 'Pod "p" is invalid: [spec: Forbidden: no, spec.x: Required value]'
    assert status["details"]["causes"][1] == {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.x"}
    assert errors.expired(3, 10).status()["message"] == "too old resource version: 3 (10)"


def test_human_durations():
    assert [human_duration(s) for s in (5, 119, 150, 3600, 7200 + 60, 3 * 3600 + 60, 3 * 86400)] == [
        "5s", "119s", "2m30s", "60m", "121m", "3h1m", "3d"]


def test_sim_serve_refuses_bad_options(capsys):
    from ganggate.cli import main

    assert main(["sim", "serve", "--nodes", "-1"]) == 2
    assert main(["sim", "serve", "--time-scale", "0"]) == 2
    assert main(["sim", "serve", "--watch-history", "0"]) == 2
    assert "must" in capsys.readouterr().out
    assert main(["sim"]) == 2  # no subcommand: help


_OPS = st.lists(st.tuples(st.sampled_from(["create", "update", "delete"]), st.integers(0, 5),
                          st.sampled_from(["a", "b", None])), max_size=40)


@given(_OPS, st.integers(0, 40))
def test_a_watch_from_any_version_replays_to_the_store_state_under_a_selector(ops, start_at):
    """Applying the events of a label-selected watch from resourceVersion N to the selected state
    at N gives the selected state now (ADDED/DELETED as objects enter and leave the selector)."""
    import json as _json

    from ganggate.sim.apiserver.store import Store

    store = Store(watch_history=1000)
    predicate = make_predicate("team=a", None, "leases")

    def selected() -> dict:
        return {o["metadata"]["name"]: o["metadata"]["resourceVersion"]
                for o in store.list("leases") if predicate(o)}

    snapshot, snapshot_rv = selected(), store.resource_version
    for index, (op, number, team) in enumerate(ops):
        name = f"l{number}"
        exists = store.get("leases", "default", name) is not None
        labels = {"team": team} if team else {}
        body = {"metadata": {"name": name, "namespace": "default", "labels": labels}, "spec": {}}
        if op == "create" and not exists:
            store.create("leases", body)
        elif op == "update" and exists:
            store.update("leases", body)
        elif op == "delete" and exists:
            store.delete("leases", "default", name)
        if index + 1 == start_at:
            snapshot, snapshot_rv = selected(), store.resource_version
    watcher = store.hub.subscribe("leases.coordination.k8s.io", "default", predicate, snapshot_rv)
    state = dict(snapshot)
    for line in watcher.drain():
        event = _json.loads(line)
        meta = event["object"]["metadata"]
        if event["type"] == "DELETED":
            assert meta["name"] in state
            del state[meta["name"]]
        else:
            assert (event["type"] == "ADDED") == (meta["name"] not in state)
            state[meta["name"]] = meta["resourceVersion"]
    assert state == selected()
