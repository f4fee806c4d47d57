"""deploy/, examples/ and the Dockerfile: they parse, validate against Kubernetes 1.30, and say
what the issue asks (least-privilege RBAC, hardened pods, a webhook that cannot block ordinary pods)."""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from ganggate.admission.review import ReviewPolicy, decide_create
from ganggate.admission.templates import WORKLOADS
from ganggate.admission.templates import pod_templates as workload_templates
from ganggate.contract import GANG_ANNOTATIONS, GangSpec, parse_gang
from tests.kubectl_support import KUBECTL

REPO = Path(__file__).resolve().parent.parent
DEPLOY = REPO / "deploy"
K8S_VERSION = "1.30"
GATE_BY_POLICY_K8S_VERSION = "1.36"
MANIFESTS = sorted(p for p in list(DEPLOY.rglob("*.yaml")) + list((REPO / "examples").glob("*.yaml"))
                   if p.name != "kustomization.yaml")
KUSTOMIZATIONS = sorted(DEPLOY.rglob("kustomization.yaml"))
OVERLAYS = sorted(p.name for p in (DEPLOY / "overlays").iterdir() if (p / "kustomization.yaml").exists())
COMPONENTS = sorted(p.name for p in (DEPLOY / "components").iterdir() if (p / "kustomization.yaml").exists())


def docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def base_objects() -> list[dict]:
    objects = []
    for name in yaml.safe_load((DEPLOY / "base" / "kustomization.yaml").read_text())["resources"]:
        objects += docs(DEPLOY / "base" / name)
    return objects


def find(objects: list[dict], kind: str, name: str) -> dict:
    (match,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return match


# --- cert-manager CRs are not in the Kubernetes schema: checked by hand ------------------------

CERT_MANAGER_REQUIRED = {
    "Issuer": lambda spec: sum(k in spec for k in ("selfSigned", "ca", "acme", "vault", "venafi")) == 1,
    "Certificate": lambda spec: bool(spec.get("secretName")) and bool(spec.get("issuerRef", {}).get("name"))
    and bool(spec.get("dnsNames") or spec.get("commonName") or spec.get("isCA")),
}


def check_cert_manager(obj: dict) -> None:
    assert obj["apiVersion"] == "cert-manager.io/v1"
    assert obj["kind"] in CERT_MANAGER_REQUIRED, obj["kind"]
    assert obj["metadata"]["name"] and obj["metadata"]["namespace"] == "ganggate-system"
    assert CERT_MANAGER_REQUIRED[obj["kind"]](obj["spec"]), obj


# The ServiceMonitor CRD (monitoring.coreos.com/v1, prometheus-operator) is not in the schema either.
SERVICE_MONITOR_SPEC = {"selector", "namespaceSelector", "endpoints", "jobLabel"}
SERVICE_MONITOR_ENDPOINT = {"port", "path", "scheme", "interval", "scrapeTimeout"}


def check_service_monitor(obj: dict) -> None:
    assert obj["apiVersion"] == "monitoring.coreos.com/v1" and obj["kind"] == "ServiceMonitor"
    assert obj["metadata"]["name"] and obj["metadata"]["namespace"] == "ganggate-system"
    spec = obj["spec"]
    assert set(spec) <= SERVICE_MONITOR_SPEC, set(spec) - SERVICE_MONITOR_SPEC
    assert spec["selector"]["matchLabels"] and all(isinstance(v, str) for v in spec["selector"]["matchLabels"].values())
    assert spec["endpoints"]
    for endpoint in spec["endpoints"]:
        assert set(endpoint) <= SERVICE_MONITOR_ENDPOINT, set(endpoint) - SERVICE_MONITOR_ENDPOINT
        assert isinstance(endpoint["port"], str) and endpoint.get("scheme", "http") in ("http", "https")
        assert re.fullmatch(r"(\d+(ms|s|m|h))+", endpoint.get("interval", "30s"))


def validate(obj: dict) -> None:
    """Kubernetes objects against the 1.30 schema; custom resources by hand."""
    if obj["apiVersion"].startswith("cert-manager.io/"):
        check_cert_manager(obj)
    elif obj["apiVersion"].startswith("monitoring.coreos.com/"):
        check_service_monitor(obj)
    elif obj["kind"].startswith("MutatingAdmissionPolicy"):
        # admissionregistration.k8s.io/v1 from 1.36 (deploy/components/gate-by-policy is for 1.36+).
        kubernetes_validate.validate(obj, GATE_BY_POLICY_K8S_VERSION, strict=True)
    else:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_manifest_parses_and_validates(path):
    objects = docs(path)
    assert objects, f"{path} is empty"
    for obj in objects:
        validate(obj)


def test_validation_would_catch_a_mistake():
    service = copy.deepcopy(find(base_objects(), "Service", "ganggate-webhook"))
    service["spec"]["ports"][0]["prot"] = 443
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(service, K8S_VERSION, strict=True)
    with pytest.raises(AssertionError):
        check_cert_manager({"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
                            "metadata": {"name": "x", "namespace": "ganggate-system"}, "spec": {"dnsNames": ["a"]}})
    monitor = copy.deepcopy(docs(DEPLOY / "components" / "servicemonitor" / "servicemonitor.yaml")[0])
    check_service_monitor(monitor)
    monitor["spec"]["endpoints"][0]["targetPort"] = 8080  # a misspelt field
    with pytest.raises(AssertionError):
        check_service_monitor(monitor)


@pytest.mark.parametrize("path", KUSTOMIZATIONS, ids=lambda p: str(p.relative_to(REPO)))
def test_kustomization_references_exist(path):
    kustomization = yaml.safe_load(path.read_text())
    if path.parent.parent.name == "components":
        assert (kustomization["apiVersion"], kustomization["kind"]) == ("kustomize.config.k8s.io/v1alpha1", "Component")
    else:
        assert (kustomization["apiVersion"], kustomization["kind"]) == ("kustomize.config.k8s.io/v1beta1", "Kustomization")
    for entry in kustomization.get("resources", []) + kustomization.get("components", []):
        target = (path.parent / entry).resolve()
        assert target.exists(), f"{path}: {entry} does not exist"
        if target.is_dir():
            assert (target / "kustomization.yaml").exists()
    for entry in kustomization.get("components", []):
        assert (path.parent / entry).resolve().parent == DEPLOY / "components"
    for patch in kustomization.get("patches", []):
        assert "patch" in patch or (path.parent / patch["path"]).exists()


def kustomize(directory: Path) -> list[dict]:
    """`kubectl kustomize` (the test extra's kubectl, with kustomize v5 built in: tests/kubectl_support.py)."""
    proc = subprocess.run([KUBECTL, "kustomize", str(directory)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def with_components(tmp_path: Path, overlay: str, *components: str) -> list[dict]:
    """Build an overlay plus components, as a user's own kustomization.yaml would list them."""
    def rel(path: Path) -> str:
        return os.path.relpath(path, tmp_path)  # kustomize refuses absolute paths
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [rel(DEPLOY / "overlays" / overlay)],
        "components": [rel(DEPLOY / "components" / c) for c in components]}))
    return kustomize(tmp_path)


def controller_args(objects: list[dict]) -> list[str]:
    (container,) = find(objects, "Deployment", "ganggate-controller")["spec"]["template"]["spec"]["containers"]
    return container["args"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlays_build_with_kustomize(overlay):
    objects = kustomize(DEPLOY / "overlays" / overlay)
    kinds = {(o["kind"], o["metadata"]["name"]) for o in objects}
    assert ("MutatingWebhookConfiguration", "ganggate") in kinds
    assert ("Deployment", "ganggate-webhook") in kinds and ("Deployment", "ganggate-controller") in kinds
    assert ("Service", "ganggate-webhook-metrics") in kinds and ("Service", "ganggate-controller-metrics") in kinds
    mwc = find(objects, "MutatingWebhookConfiguration", "ganggate")
    injected = (mwc["metadata"].get("annotations") or {}).get("cert-manager.io/inject-ca-from")
    if overlay == "self-signed":
        assert injected is None
    else:
        # The Certificate named by the annotation exists and issues the secret the webhook mounts.
        assert injected == "ganggate-system/ganggate-webhook"
        cert = find(objects, "Certificate", "ganggate-webhook")
        assert cert["spec"]["secretName"] == "ganggate-webhook-tls"
    for obj in objects:
        validate(obj)
    images = {c["image"] for o in objects if o["kind"] == "Deployment"
              for c in o["spec"]["template"]["spec"]["containers"]}
    assert images == {"ghcr.io/ganggate/ganggate:0.1.0"}


@pytest.mark.parametrize("overlay", ["cert-manager", "self-signed"])
def test_every_component_builds_into_an_overlay(overlay, tmp_path):
    # gate-by-policy (1.36+) and webhook-update-check (before 1.30) are for opposite ends of the
    # versions and both rewrite the webhook's matchConditions: never together.
    objects = with_components(tmp_path, overlay, *(c for c in COMPONENTS if c != "gate-by-policy"))
    for obj in objects:
        validate(obj)
    assert [o["metadata"]["name"] for o in objects if o["kind"] == "ServiceMonitor"] == ["ganggate"]
    assert controller_args(objects).count("--on-bind-timeout=recreate") == 1


# --- RBAC: exactly what the controller needs, nothing for the webhook --------------------------

EXPECTED_CONTROLLER_RULES = {
    ("", "pods"): {"get", "list", "watch", "patch", "delete"},
    ("", "pods/status"): {"patch"},
    ("policy", "poddisruptionbudgets"): {"list", "watch", "create", "delete"},
    ("", "nodes"): {"get", "list", "watch"},
    ("", "events"): {"create", "patch"},
    ("events.k8s.io", "events"): {"create", "patch"},
    ("coordination.k8s.io", "leases"): {"get", "create", "update"},
    ("batch", "jobs"): {"get"},
    ("scheduling.k8s.io", "podgroups"): {"list", "watch", "create"},
    ("scheduling.k8s.io", "podgroups/status"): {"patch"},
    **{("resource.k8s.io", kind): {"list", "watch"}
       for kind in ("deviceclasses", "resourceslices", "resourceclaimtemplates")},
    # a released DRA gang's claims allocated before its gates go (docs/dra.md)
    ("resource.k8s.io", "resourceclaims"): {"get", "list", "watch", "update"},
    ("resource.k8s.io", "resourceclaims/status"): {"update"},
    ("resource.k8s.io", "resourceclaims/binding"): {"update"},
}


def granted(objects: list[dict], service_account: str) -> dict[tuple[str, str], set[str]]:
    """Every (apiGroup, resource) -> verbs bound to the service account, by any (Cluster)Role."""
    roles = {(o["kind"], o["metadata"]["name"]): o for o in objects if o["kind"] in ("Role", "ClusterRole")}
    grants: dict[tuple[str, str], set[str]] = {}
    for binding in (o for o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        if not any(s["kind"] == "ServiceAccount" and s["name"] == service_account
                   and s["namespace"] == "ganggate-system" for s in binding["subjects"]):
            continue
        role = roles[(binding["roleRef"]["kind"], binding["roleRef"]["name"])]
        for rule in role["rules"]:
            assert "resourceNames" not in rule or rule["resourceNames"]
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    grants.setdefault((group, resource), set()).update(rule["verbs"])
    return grants


def test_controller_rbac_is_exactly_what_it_needs():
    objects = base_objects()
    grants = granted(objects, "ganggate-controller")
    assert grants == EXPECTED_CONTROLLER_RULES
    assert all("*" not in verbs for verbs in grants.values())
    # Leases only in ganggate-system (a Role, not a ClusterRole).
    lease_role = [o for o in objects if o["kind"] == "Role"
                  and any("leases" in r["resources"] for r in o["rules"])]
    assert [r["metadata"]["namespace"] for r in lease_role] == ["ganggate-system"]
    assert not any("leases" in r["resources"] for o in objects if o["kind"] == "ClusterRole" for r in o["rules"])


def test_webhook_has_no_api_access():
    objects = base_objects()
    assert granted(objects, "ganggate-webhook") == {}
    assert find(objects, "ServiceAccount", "ganggate-webhook")["automountServiceAccountToken"] is False


def deletes_pods(args: list[str]) -> bool:
    """Whether the controller run with these args has a policy that deletes pods (the last of a
    repeated flag wins, as with argparse): --on-member-loss=restart (default), or
    --on-bind-timeout=recreate, or --on-bind-timeout=member-loss (default) under restart."""
    def last(flag: str, default: str) -> str:
        values = [a.split("=", 1)[1] for a in args if a.startswith(flag + "=")]
        return values[-1] if values else default
    on_loss, on_timeout = last("--on-member-loss", "restart"), last("--on-bind-timeout", "member-loss")
    return on_loss == "restart" or on_timeout == "recreate"


# The recreate overlay already lists recreate-on-bind-timeout: it is built alone.
@pytest.mark.parametrize("overlay, components", [
    (overlay, components) for overlay in OVERLAYS
    for components in [(), ("member-loss-report-only",), ("recreate-on-bind-timeout",),
                       ("member-loss-report-only", "recreate-on-bind-timeout")]
    if not (overlay == "recreate" and components)])
def test_pod_delete_is_granted_iff_a_deleting_policy_is_on(overlay, components, tmp_path):
    objects = with_components(tmp_path, overlay, *components)
    grants = granted(objects, "ganggate-controller")
    deleting = deletes_pods(controller_args(objects))
    assert ("delete" in grants[("", "pods")]) == deleting
    assert deleting == (components != ("member-loss-report-only",))
    assert grants[("", "pods")] - {"delete"} == EXPECTED_CONTROLLER_RULES[("", "pods")] - {"delete"}


# --- metrics: each replica scraped over plain HTTP, through a Service -------------------------------

def container_port(deployment: dict, name: str) -> int:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    (port,) = [p["containerPort"] for p in container["ports"] if p["name"] == name]
    return port


def arg(deployment: dict, flag: str) -> str:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    (value,) = [a.split("=", 1)[1] for a in container["args"] if a.startswith(flag + "=")]
    return value


@pytest.mark.parametrize("name", ["ganggate-webhook", "ganggate-controller"])
def test_metrics_services_reach_each_metrics_port(name):
    objects = base_objects()
    deployment = find(objects, "Deployment", name)
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    port = container_port(deployment, "metrics")
    assert int(arg(deployment, "--metrics-port")) == port
    assert deployment["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"] == str(port)
    assert "prometheus.io/scheme" not in deployment["spec"]["template"]["metadata"]["annotations"]
    service = find(objects, "Service", f"{name}-metrics")
    assert service["spec"]["selector"].items() <= labels.items()
    (service_port,) = service["spec"]["ports"]
    assert service_port["name"] == "metrics" and service_port["targetPort"] == "metrics"
    # The admission Service does not expose the metrics port.
    if name == "ganggate-webhook":
        assert [p["targetPort"] for p in find(objects, "Service", name)["spec"]["ports"]] == ["https"]


def test_the_service_monitor_selects_exactly_the_metrics_services():
    (monitor,) = docs(DEPLOY / "components" / "servicemonitor" / "servicemonitor.yaml")
    selector = monitor["spec"]["selector"]["matchLabels"]
    services = [o for o in base_objects() if o["kind"] == "Service"]
    selected = sorted(s["metadata"]["name"] for s in services
                      if selector.items() <= (s["metadata"].get("labels") or {}).items())
    assert selected == ["ganggate-controller-metrics", "ganggate-webhook-metrics"]
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == ["ganggate-system"]
    for service in services:
        if service["metadata"]["name"] in selected:
            assert {e["port"] for e in monitor["spec"]["endpoints"]} <= {p["name"] for p in service["spec"]["ports"]}


# --- stopping cleanly ------------------------------------------------------------------------------

def test_the_webhook_has_time_to_leave_the_endpoints_and_drain():
    deployment = find(base_objects(), "Deployment", "ganggate-webhook")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    pre_stop = container["lifecycle"]["preStop"]["sleep"]["seconds"]
    grace = float(arg(deployment, "--shutdown-grace-seconds"))
    assert pre_stop > 0 and pod["terminationGracePeriodSeconds"] > pre_stop + grace


def test_the_controller_knows_its_namespace_and_has_time_to_stop():
    from ganggate.controller.round.loop import ControllerConfig

    deployment = find(base_objects(), "Deployment", "ganggate-controller")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert not any(a.startswith("--lease-namespace") for a in container["args"])  # the downward API decides
    assert pod["terminationGracePeriodSeconds"] > ControllerConfig().shutdown_grace_seconds


# --- Deployments: hardened, probed, bounded ------------------------------------------------------

@pytest.mark.parametrize("name", ["ganggate-webhook", "ganggate-controller"])
def test_deployments_are_hardened(name):
    deployment = find(base_objects(), "Deployment", name)
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for container in pod["containers"]:
        sc = container["securityContext"]
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"]["drop"] == ["ALL"] and "add" not in sc["capabilities"]
        assert set(container["resources"]["requests"]) >= {"cpu", "memory"}
        assert set(container["resources"]["limits"]) >= {"cpu", "memory"}
        assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
        assert container["args"][0] == name.removeprefix("ganggate-")
    assert deployment["spec"]["selector"]["matchLabels"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()


def test_webhook_serves_its_mounted_secret_behind_the_service():
    objects = base_objects()
    deployment = find(objects, "Deployment", "ganggate-webhook")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = dict(a.split("=", 1) for a in container["args"][1:])
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    tls_volume = volumes[mounts[str(Path(args["--cert-file"]).parent)]]
    assert tls_volume["secret"]["secretName"] == "ganggate-webhook-tls"
    assert Path(args["--key-file"]).parent == Path(args["--cert-file"]).parent
    assert "/tmp" in mounts  # the certificate reloader needs a writable /tmp on a read-only root
    assert container["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    service = find(objects, "Service", "ganggate-webhook")
    assert service["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    (port,) = service["spec"]["ports"]
    assert port["targetPort"] in ("https", int(args["--port"]))
    mwc = find(objects, "MutatingWebhookConfiguration", "ganggate")
    svc_ref = mwc["webhooks"][0]["clientConfig"]["service"]
    assert (svc_ref["name"], svc_ref["namespace"], svc_ref["port"], svc_ref["path"]) == (
        "ganggate-webhook", "ganggate-system", port["port"], "/mutate")
    pdbs = [o for o in objects if o["kind"] == "PodDisruptionBudget"]
    assert any(p["spec"]["selector"]["matchLabels"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
               for p in pdbs)


# --- the MutatingWebhookConfiguration -------------------------------------------------------------

def webhook_configurations() -> list[dict]:
    return [find(base_objects(), "MutatingWebhookConfiguration", "ganggate"),
            docs(DEPLOY / "kubesim" / "webhook-url.yaml")[0]]


@pytest.mark.parametrize("mwc", webhook_configurations(), ids=["service", "url"])
def test_webhook_configuration_settings(mwc):
    hook, templates = mwc["webhooks"]
    assert hook["name"] == "gang-gate.ganggate.io" and templates["name"] == "gang-template.ganggate.io"
    assert hook["admissionReviewVersions"] == ["v1"]
    assert hook["sideEffects"] == "None"
    assert hook["failurePolicy"] == "Fail"
    assert hook["timeoutSeconds"] == 5
    assert hook["reinvocationPolicy"] == "IfNeeded"
    (rule,) = hook["rules"]
    # CREATE only: the ValidatingAdmissionPolicy ganggate-gang-annotations-immutable checks updates.
    assert rule["resources"] == ["pods"] and rule["operations"] == ["CREATE"]
    (expr,) = hook["namespaceSelector"]["matchExpressions"]
    assert expr["key"] == "kubernetes.io/metadata.name" and expr["operator"] == "NotIn"
    assert set(expr["values"]) == {"kube-system", "ganggate-system"}
    # The workload check: the same endpoint, never mutating, advice only (the pods are checked anyway).
    assert templates["clientConfig"] == hook["clientConfig"]
    assert templates["failurePolicy"] == "Ignore" and templates["sideEffects"] == "None"
    assert "reinvocationPolicy" not in templates
    resources = {(g, r) for rule in templates["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
    assert {(group, kind) for group, kind in WORKLOADS} == {(g, KINDS[r]) for g, r in resources}
    assert all(rule["operations"] == ["CREATE", "UPDATE"] for rule in templates["rules"])
    assert templates["namespaceSelector"] == hook["namespaceSelector"]


KINDS = {"jobs": "Job", "cronjobs": "CronJob", "jobsets": "JobSet", "pytorchjobs": "PyTorchJob", "tfjobs": "TFJob",
         "mpijobs": "MPIJob", "xgboostjobs": "XGBoostJob", "paddlejobs": "PaddleJob"}


def test_kubesim_configuration_is_the_base_one_with_a_url():
    base, url = webhook_configurations()
    for hook in url["webhooks"]:
        assert hook["clientConfig"] == {"url": "https://127.0.0.1:8443/mutate"}
    for mwc in (base, url):
        for hook in mwc["webhooks"]:
            del hook["clientConfig"]
    assert base == url


def match_condition(mwc: dict, index: int = 0):
    """The CEL matchCondition, compiled with cel-python as a predicate on (object, oldObject)."""
    import celpy

    (condition,) = mwc["webhooks"][index]["matchConditions"]
    env = celpy.Environment()
    program = env.program(env.compile(condition["expression"]))

    def matches(obj: dict, old: dict | None) -> bool:
        request = {"operation": "CREATE" if old is None else "UPDATE"}
        activation = {"object": celpy.json_to_cel(obj), "oldObject": celpy.json_to_cel(old),
                      "request": celpy.json_to_cel(request)}
        result = program.evaluate(activation)
        assert isinstance(result, celpy.celtypes.BoolType), result  # never an error
        return bool(result)

    return matches


def pod(annotations: dict | None) -> dict:
    metadata = {"name": "p", "namespace": "ml"}
    if annotations is not None:
        metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": {"containers": []}}


def test_match_conditions_send_only_gang_pods():
    matches = match_condition(webhook_configurations()[0])
    # CREATE (oldObject null): only pods with a gang annotation.
    assert not matches(pod(None), None)
    assert not matches(pod({"team": "a"}), None)
    for key in GANG_ANNOTATIONS:
        assert matches(pod({key: "x"}), None)
    # (UPDATE is matched only with the component webhook-update-check: tests/test_admission_policies.py.)


def _template(annotations: dict | None = None, limits: dict | None = None) -> dict:
    template: dict = {"spec": {"containers": [{"name": "main", "image": "busybox:1.36"}]}}
    if annotations is not None:
        template["metadata"] = {"annotations": annotations}
    if limits is not None:
        template["spec"]["containers"][0]["resources"] = {"limits": limits}
    return template


WRAPPERS = {
    "Job": lambda t: {"spec": {"template": t}},
    "CronJob": lambda t: {"spec": {"jobTemplate": {"spec": {"template": t}}}},
    "JobSet": lambda t: {"spec": {"replicatedJobs": [{"template": {"spec": {"template": _template()}}},
                                                     {"template": {"spec": {"template": t}}}]}},
    **{kind: (lambda specs: lambda t: {"spec": {specs: {"Master": {"template": _template()}, "Worker": {"template": t}}}})(field)
       for kind, field in (("PyTorchJob", "pytorchReplicaSpecs"), ("TFJob", "tfReplicaSpecs"), ("MPIJob", "mpiReplicaSpecs"),
                           ("XGBoostJob", "xgbReplicaSpecs"), ("PaddleJob", "paddleReplicaSpecs"))},
}


@pytest.mark.parametrize("kind", sorted(WRAPPERS))
def test_the_template_webhook_is_sent_only_workloads_with_a_gang_or_shared_gpu_template(kind):
    matches = match_condition(webhook_configurations()[0], index=1)
    assert {k for _, k in WORKLOADS} == set(WRAPPERS)
    for template in (_template(), _template({"team": "a"}), _template(limits={"nvidia.com/gpu": "1"})):
        assert not matches(dict(WRAPPERS[kind](template), kind=kind), None)
    for key in GANG_ANNOTATIONS:
        assert matches(dict(WRAPPERS[kind](_template({key: "x"})), kind=kind), None)
    assert matches(dict(WRAPPERS[kind](_template(limits={"aliyun.com/gpu-mem": "8"})), kind=kind), None)
    # Each workload's templates are where ganggate.admission.templates looks for them.
    group = next(g for g, k in WORKLOADS if k == kind)
    obj = dict(WRAPPERS[kind](_template({"scheduling.k8s.io/group-name": "g"})), kind=kind)
    assert [t.get("metadata") for _, t in workload_templates(group, kind, obj)][-1] == {
        "annotations": {"scheduling.k8s.io/group-name": "g"}}


# --- examples --------------------------------------------------------------------------------------

def pod_templates(obj: dict) -> list[dict]:
    if obj["kind"] == "Pod":
        return [obj]
    if obj["kind"] in ("Job", "Deployment", "StatefulSet"):
        return [obj["spec"]["template"]]
    return []


def test_examples_behave_as_their_comments_say():
    policy = ReviewPolicy()
    outcomes = {}
    for path in sorted((REPO / "examples").glob("*.yaml")):
        for obj in docs(path):
            for template in pod_templates(obj):
                outcomes.setdefault(path.name, set()).add(decide_create(template, policy).outcome)
    assert outcomes == {
        "pytorch-ddp-job.yaml": {"gated"},
        "pytorch-elastic-job.yaml": {"gated"},
        "mpi-gang-pods.yaml": {"gated"},
        "volcano-pod.yaml": {"other_scheduler"},
        "invalid-gang-pod.yaml": {"denied"},
    }
    invalid = docs(REPO / "examples" / "invalid-gang-pod.yaml")[0]
    message = decide_create(invalid, policy).message
    comment = " ".join(line.lstrip("# ").strip() for line in
                       (REPO / "examples" / "invalid-gang-pod.yaml").read_text().splitlines() if line.startswith("#"))
    assert message in comment
    ddp = docs(REPO / "examples" / "pytorch-ddp-job.yaml")[1]
    gang = parse_gang(ddp["spec"]["template"]["metadata"]["annotations"])
    assert isinstance(gang, GangSpec) and gang.pod_num == ddp["spec"]["parallelism"]


# --- Dockerfile ---------------------------------------------------------------------------------------

def dockerfile_stages() -> list[list[tuple[str, str]]]:
    """Instructions per stage, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", (REPO / "Dockerfile").read_text())
    stages: list[list[tuple[str, str]]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        instruction, _, rest = line.partition(" ")
        if instruction.upper() == "FROM":
            stages.append([])
        stages[-1].append((instruction.upper(), rest.strip()))
    return stages


def test_dockerfile_is_multi_stage_non_root_with_ganggate_entrypoint():
    stages = dockerfile_stages()
    assert len(stages) >= 2
    builder, final = stages[0], stages[-1]
    assert builder[0][1].startswith("python:3.11-slim AS builder")
    assert any(i == "RUN" and "pip wheel" in r for i, r in builder)
    assert final[0][1].startswith("python:3.11-slim")
    assert any(i == "COPY" and "--from=builder" in r for i, r in final)
    assert any(i == "RUN" and "pip install" in r and "ganggate" in r for i, r in final)
    users = [r for i, r in final if i == "USER"]
    assert users and users[-1].split(":")[0] == "65532"
    (entrypoint,) = [r for i, r in final if i == "ENTRYPOINT"]
    assert entrypoint == '["ganggate"]'
    # Every package the wheel is built from is copied into the builder.
    import tomllib

    packages = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    copied = {r.split()[0] for i, r in builder if i == "COPY"}
    top_level = {p.split(".")[0].rstrip("*") for p in packages}
    assert top_level == {"ganggate"}
    assert top_level <= copied
    ignored = (REPO / ".dockerignore").read_text().split()
    assert not top_level & set(ignored)


# --- make image: the builder that works, or one line saying what to install ----------------------------

def bin_dir(tmp_path: Path, **fakes: str) -> Path:
    """A PATH with make, sh and sed only, plus fake container CLIs given as shell script bodies."""
    path = tmp_path / "bin"
    path.mkdir()
    for tool in ("make", "sh", "sed"):
        (path / tool).symlink_to(shutil.which(tool))
    for tool, body in fakes.items():
        (path / tool).write_text(f"#!/bin/sh\n{body}\n")
        (path / tool).chmod(0o755)
    return path


def make_image(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(path / "make"), "-C", str(REPO), "--no-print-directory", "image"],
                          capture_output=True, text=True, timeout=60, env={"PATH": str(path)})


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_image_without_any_builder_says_what_to_install(tmp_path):
    result = make_image(bin_dir(tmp_path))
    assert result.returncode != 0
    assert result.stderr.splitlines()[0] == (
        "make image: no container builder found: install docker (with its daemon running), podman or buildah")


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_image_does_not_count_a_docker_without_daemon(tmp_path):
    result = make_image(bin_dir(tmp_path, docker='echo "Cannot connect to the Docker daemon" >&2; exit 1'))
    assert result.returncode != 0
    (line, *_) = result.stderr.splitlines()
    assert line.startswith("make image: no working container builder: installed but not working: "
                           "docker ('docker info' fails)")
    assert "install podman or buildah" in line


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
@pytest.mark.parametrize("builder, verb", [("podman", "build"), ("buildah", "bud")])
def test_make_image_builds_with_the_first_builder_that_works(tmp_path, builder, verb):
    record = tmp_path / "called"
    path = bin_dir(tmp_path, docker="exit 1", **{builder: f'[ "$1" = info ] && exit 0; echo "$@" > {record}'})
    result = make_image(path)
    assert result.returncode == 0, result.stderr
    version = re.search(r'^version = "(.+)"', (REPO / "pyproject.toml").read_text(), re.M).group(1)
    assert record.read_text().split() == [verb, "--tag", f"ghcr.io/ganggate/ganggate:{version}", "."]


def test_the_autoscaling_component_grants_provisioning_requests_and_turns_them_on(tmp_path):
    """--autoscaling=provisioning-request needs ProvisioningRequests and PodTemplates; the base grants neither."""
    objects = with_components(tmp_path, "self-signed", "autoscaling-provisioning-request")
    grants = granted(objects, "ganggate-controller")
    assert grants[("autoscaling.x-k8s.io", "provisioningrequests")] == {"get", "create", "delete"}
    assert grants[("", "podtemplates")] == {"create", "delete"}
    assert "--autoscaling=provisioning-request" in controller_args(objects)
    assert ("autoscaling.x-k8s.io", "provisioningrequests") not in granted(base_objects(), "ganggate-controller")


def test_the_placeholders_component_grants_pod_create_and_the_priority_class(tmp_path):
    objects = with_components(tmp_path, "self-signed", "autoscaling-placeholders")
    grants = granted(objects, "ganggate-controller")
    assert {"create", "delete"} <= grants[("", "pods")]
    assert grants[("scheduling.k8s.io", "priorityclasses")] == {"create"}
    assert "--autoscaling=placeholders" in controller_args(objects)
    assert "create" not in granted(base_objects(), "ganggate-controller")[("", "pods")]


@pytest.mark.parametrize("overlay", ["cert-manager"])  # the overlays differ only in how the certificates are made
def test_the_gate_by_policy_component_narrows_the_webhook_to_what_a_policy_cannot_gate(overlay, tmp_path):
    objects = with_components(tmp_path, overlay, "gate-by-policy")
    kinds = {(o["kind"], o["metadata"]["name"]) for o in objects}
    # The webhook is sent only what a policy cannot gate: shared-GPU pods without gang annotations,
    # and pods naming a PodGroup (gated by the webhook when ganggate admits PodGroup gangs).
    matches = match_condition(find(objects, "MutatingWebhookConfiguration", "ganggate"))
    shared = {"containers": [{"name": "m", "resources": {"limits": {"aliyun.com/gpu-mem": "4"}}}]}
    assert matches({"metadata": {}, "spec": shared}, None)
    assert matches({"metadata": {}, "spec": {"schedulingGroup": {"podGroupName": "train"},
                                             "containers": [{"name": "m"}]}}, None)
    for key in GANG_ANNOTATIONS:
        assert not matches({"metadata": {"annotations": {key: "x"}}, "spec": shared}, None)
        assert not matches(pod({key: "x"}), None)
    assert not matches(pod(None), None)
    assert {("MutatingAdmissionPolicy", "ganggate-gang-gate"), ("MutatingAdmissionPolicyBinding", "ganggate-gang-gate"),
            ("ValidatingAdmissionPolicy", "ganggate-gang-pod-create"),
            ("ValidatingAdmissionPolicyBinding", "ganggate-gang-pod-create"),
            ("ValidatingAdmissionPolicy", "ganggate-gang-annotations-immutable")} <= kinds
    assert ("Deployment", "ganggate-webhook") in kinds  # kept: dropping the component goes back to it
    for obj in objects:
        validate(obj)
        if obj["kind"] in ("MutatingAdmissionPolicy", "ValidatingAdmissionPolicy"):
            assert obj["apiVersion"] == "admissionregistration.k8s.io/v1" and "namespace" not in obj["metadata"]
            # A gang pod never slips through ungated or unchecked (the Job check is advice: Ignore).
            assert obj["spec"]["failurePolicy"] == ("Ignore" if obj["metadata"]["name"] == "ganggate-job-gang-size"
                                                    else "Fail")
