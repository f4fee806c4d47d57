"""core/v1 Services on kubesim: defaulting, cluster IPs, validation, the `kubernetes` Service."""

from __future__ import annotations

import ipaddress

SERVICES = "/api/v1/namespaces/default/services"


def service(name: str, **spec) -> dict:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": spec}


async def test_cluster_ip_is_allocated_and_ports_defaulted(raw):
    status, body, _ = await raw.request("POST", SERVICES, service("web", selector={"app": "web"}, ports=[{"port": 80}]))
    assert status == 201, body
    spec = body["spec"]
    assert ipaddress.ip_address(spec["clusterIP"]) in ipaddress.ip_network("10.96.0.0/12")
    assert spec["clusterIP"] != "10.96.0.1" and spec["clusterIPs"] == [spec["clusterIP"]]
    assert spec["type"] == "ClusterIP" and spec["sessionAffinity"] == "None"
    assert spec["ports"] == [{"port": 80, "protocol": "TCP", "targetPort": 80}]
    assert spec["ipFamilies"] == ["IPv4"] and spec["ipFamilyPolicy"] == "SingleStack"
    status, other, _ = await raw.request("POST", SERVICES, service("web2", ports=[{"port": 80}]))
    assert other["spec"]["clusterIP"] != spec["clusterIP"]


async def test_headless_service_needs_no_ports_and_gets_no_ip(raw):
    status, body, _ = await raw.request("POST", SERVICES, service("workers", clusterIP="None", selector={"job-name": "ddp"}))
    assert status == 201, body
    assert body["spec"]["clusterIP"] == "None" and body["spec"]["clusterIPs"] == ["None"]


async def test_invalid_services_are_refused_and_nothing_is_stored(raw, sim):
    cases = [
        (service("noports", selector={"a": "b"}), "spec.ports: Required value"),
        (service("badport", ports=[{"port": 0}]), "spec.ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive"),
        (service("two", ports=[{"port": 1}, {"port": 2}]), "spec.ports[0].name: Required value"),
        (service("1abc", ports=[{"port": 1}]), "a DNS-1035 label"),
        (service("ext", type="ExternalName"), "spec.externalName: Required value"),
        (service("proto", ports=[{"port": 1, "protocol": "HTTP"}]), 'spec.ports[0].protocol: Unsupported value: "HTTP"'),
        (service("taken", clusterIP="10.96.0.1", ports=[{"port": 1}]), "provided IP is already allocated"),
    ]
    for manifest, message in cases:
        status, body, _ = await raw.request("POST", SERVICES, manifest)
        assert status == 422 and message in body["message"], (manifest, body)
    assert [s["metadata"]["name"] for s in sim.store.list("services")] == ["kubernetes"]


async def test_cluster_ip_may_not_change_and_is_kept_when_omitted(raw):
    _, created, _ = await raw.request("POST", SERVICES, service("db", ports=[{"port": 5432}]))
    ip = created["spec"]["clusterIP"]
    status, body, _ = await raw.request("PATCH", f"{SERVICES}/db", {"spec": {"clusterIP": "10.96.0.99", "clusterIPs": None}},
                                        "application/merge-patch+json")
    assert status == 422 and "spec.clusterIPs[0]" in body["message"] and "may not change once set" in body["message"]
    replacement = service("db", ports=[{"port": 5433}])
    replacement["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"]
    status, body, _ = await raw.request("PUT", f"{SERVICES}/db", replacement)
    assert status == 200, body
    assert body["spec"]["clusterIP"] == ip and body["spec"]["ports"][0]["port"] == 5433


async def test_the_kubernetes_service_exists(raw):
    status, body, _ = await raw.request("GET", f"{SERVICES}/kubernetes")
    assert status == 200 and body["spec"]["clusterIP"] == "10.96.0.1" and body["spec"]["ports"][0]["port"] == 443


async def test_services_are_listed_watched_and_in_discovery(raw):
    _, resources, _ = await raw.request("GET", "/api/v1")
    entry = next(r for r in resources["resources"] if r["name"] == "services")
    assert entry["kind"] == "Service" and entry["shortNames"] == ["svc"] and entry["namespaced"]
    await raw.request("POST", SERVICES, service("listed", ports=[{"port": 1}]))
    status, listed, _ = await raw.request("GET", f"{SERVICES}?labelSelector=provider%3Dkubernetes")
    assert status == 200 and [s["metadata"]["name"] for s in listed["items"]] == ["kubernetes"]
    status, _, _ = await raw.request("DELETE", f"{SERVICES}/listed")
    assert status == 200
