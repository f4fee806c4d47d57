"""`ganggate status` for PodGroup gangs (ganggate.podgroups): the gangs ganggate admits are read
into the gang table as any gang; the PodGroups whose pods ganggate left ungated, for the
scheduler's own gang plugin, get a table of their own (pods present, bound, the condition).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ganggate.controller.round.podgroups import admitted_by_ganggate
from ganggate.podgroups import (
    GROUP,
    INITIALLY_SCHEDULED,
    PLURAL,
    VERSIONS,
    condition_type,
    min_count,
    pod_group_name,
    project,
)


async def list_podgroups(api_client: Any, list_all: Any) -> list[dict]:
    """Every PodGroup (read with status.list_all), or none where they are not served (GenericWorkload
    off) or not readable."""
    from kubernetes_asyncio import client

    from ganggate.kube.calls import ApiCallError

    custom = client.CustomObjectsApi(api_client)
    for version in VERSIONS:
        try:
            items = await list_all(functools.partial(custom.list_cluster_custom_object, GROUP, version, PLURAL))
            return [dict(pg, apiVersion=pg.get("apiVersion") or f"{GROUP}/{version}") for pg in items]
        except ApiCallError:
            continue
    return []


def _group(obj: dict) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return meta.get("namespace") or "default", meta.get("name") or ""


def project_all(pods: list[dict], podgroups: list[dict]) -> list[dict]:
    """The pods as the controller reads them: ganggate-admitted pods of a PodGroup as its gang's members."""
    if not podgroups:
        return pods
    by_key = {_group(pg): pg for pg in podgroups}
    out = []
    for pod in pods:
        name = pod_group_name(pod)
        if name is not None and admitted_by_ganggate(pod):
            pod = project(pod, by_key.get(((pod.get("metadata") or {}).get("namespace") or "default", name)))
        out.append(pod)
    return out


def native_rows(pods: list[dict], podgroups: list[dict], namespace: str | None = None) -> list[list[str]]:
    """One row per gang PodGroup that has pods ganggate did not gate: name, pods/minCount, bound, condition."""
    members: dict[tuple[str, str], list[dict]] = {}
    for pod in pods:
        name = pod_group_name(pod)
        phase = (pod.get("status") or {}).get("phase")
        if name is None or admitted_by_ganggate(pod) or phase in ("Succeeded", "Failed"):
            continue
        members.setdefault(((pod.get("metadata") or {}).get("namespace") or "default", name), []).append(pod)
    rows = []
    for podgroup in sorted(podgroups, key=_group):
        key = _group(podgroup)
        count = min_count(podgroup)
        if count is None or key not in members or (namespace is not None and key[0] != namespace):
            continue
        live = members[key]
        bound = sum(1 for p in live if (p.get("spec") or {}).get("nodeName"))
        condition = next((c for c in (podgroup.get("status") or {}).get("conditions") or []
                          if c.get("type") == condition_type(podgroup)), None)
        said = "-" if condition is None else f"{condition.get('status')}: {condition.get('reason')}" + (
            f": {condition['message']}" if condition.get("message") else "")
        rows.append([f"{key[0]}/{key[1]}", f"{len(live)}/{count}", str(bound), said])
    return rows


async def native_text(api_client: Any, namespace: str | None, list_all: Any,
                      table: Callable[[list[str], list[list[str]]], str]) -> str:
    """The table of PodGroups the scheduler admits (status's list_all and table), or "" when none."""
    podgroups = await list_podgroups(api_client, list_all)
    if not podgroups:
        return ""
    from kubernetes_asyncio import client

    pods = await list_all(client.CoreV1Api(api_client).list_pod_for_all_namespaces)
    rows = native_rows(pods, podgroups, namespace)
    if not rows:
        return ""
    return ("\nPodGroups admitted by the scheduler's gang plugin (pods left ungated):\n"
            + table(["PODGROUP", "PODS", "BOUND", INITIALLY_SCHEDULED.upper()], rows) + "\n")
