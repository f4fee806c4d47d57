"""kube-controller-manager's resourceclaim controller stand-in (pkg/controller/resourceclaim/controller.go
at v1.35), an HTTP client of the API server.

For each pod's spec.resourceClaims entry naming a ResourceClaimTemplate (syncPod / handleClaim): find
the claim this pod owns for it (annotation `resource.kubernetes.io/pod-claim-name`), or create one
from the template (generateName `<pod>-<claim>-`, the template's labels and annotations, a controller
ownerReference to the pod with blockOwnerDeletion), then record it in the pod's
status.resourceClaimStatuses. Pods that are terminal or being deleted get no new claim.
For each claim (syncClaim): drop from status.reservedFor the pods that are gone or terminal; a
claim that this leaves with no reservation is deallocated (status.allocation cleared) if it
carries the finalizer `resource.kubernetes.io/delete-protection` (which the scheduler adds when it
allocates), and the finalizer is then removed; a claim allocated but never reserved (allocated by
another client ahead of its pods) stays allocated. A claim made for a pod that is gone or done is
deleted (for a pod that is gone, the real garbage collector does it through the ownerReference;
kubesim's collects only pods, so it is done here). A claim of a pod that is still gated is made
all the same: podNeedsWork and syncPod look at no scheduling gate. kubesim deletes at once
(no finalizers hold a deletion), so the branch for a claim being deleted with the finalizer
does not arise.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Mapping
from typing import Any

import aiohttp

from ganggate.sim.api import resource as api
from ganggate.sim.client.informers import ReflectorLike, SharedInformers, object_key, reflector_for
from ganggate.sim.client.workqueue import WorkQueue

log = logging.getLogger(__name__)

TERMINAL = ("Succeeded", "Failed")
MERGE_PATCH = "application/merge-patch+json"
_CLAIMS = f"/apis/{api.API_VERSION}/resourceclaims"
POD_KEY, CLAIM_KEY = "pod:", "claim:"  # podKeyPrefix, claimKeyPrefix
#: defaultResourceClaimControllerWorkers (cmd/kube-controller-manager/app/core.go): 50 since 1.34
#: (kubernetes/kubernetes#133113, "bump resource claim controller concurrent syncs to 50"); a flag
#: only from 1.36 (--concurrent-resource-claim-syncs, #134701).
CONCURRENT_SYNCS = 50


def pod_done(pod: Mapping[str, Any] | None) -> bool:
    """podutil.IsPodTerminal or gone: a pod that uses its claims no more."""
    return pod is None or (pod.get("status") or {}).get("phase") in TERMINAL


def generate_name(pod_name: str, claim_name: str) -> str:
    """handleClaim's generateName: `<pod>-<claim>-`, each part cut to 28 characters when longer than 57."""
    name = f"{pod_name}-{claim_name}-"
    if len(name) > 57:
        name = f"{pod_name[:28]}-{claim_name[:28]}-"
    return name


def claim_from_template(pod: Mapping[str, Any], entry: Mapping[str, Any], template: Mapping[str, Any]) -> dict[str, Any]:
    """The ResourceClaim a template makes for one pod claim entry."""
    meta = pod["metadata"]
    spec = template.get("spec") or {}
    template_meta = spec.get("metadata") or {}
    annotations = dict(template_meta.get("annotations") or {})
    annotations[api.POD_CLAIM_NAME_ANNOTATION] = entry["name"]
    return {
        "apiVersion": api.API_VERSION, "kind": "ResourceClaim",
        "metadata": {
            "generateName": generate_name(meta["name"], entry["name"]),
            "namespace": meta.get("namespace", "default"),
            "labels": dict(template_meta.get("labels") or {}),
            "annotations": annotations,
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta.get("uid", ""),
                                 "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": copy.deepcopy(spec.get("spec") or {}),
    }


def owner_pod_uid(claim: Mapping[str, Any]) -> str | None:
    for ref in (claim.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == "Pod":
            return str(ref.get("uid"))
    return None


class ResourceClaimController:
    """Claims for pods from templates, and claims released when their pods are done."""

    def __init__(self, base_url: str, *, retry_seconds: float = 0.5, shared: SharedInformers | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.shared = shared
        self._session: aiohttp.ClientSession | None = None
        self._pods: ReflectorLike | None = None
        self._claims: ReflectorLike | None = None
        self._templates: ReflectorLike | None = None
        # One queue of "pod:" and "claim:" keys (claimKeyPrefix, podKeyPrefix), worked off by
        # CONCURRENT_SYNCS workers, as kube-controller-manager runs the controller.
        self._queue = WorkQueue(retry_seconds)
        self._pods_by_uid: dict[str, str] = {}
        self.ready = asyncio.Event()

    # -- handlers ------------------------------------------------------------------------------

    @property
    def _http(self) -> aiohttp.ClientSession:
        """The session run() opened (its callers run under run())."""
        assert self._session is not None, "called before run() opened the session"
        return self._session

    def on_pod(self, kind: str, pod: dict, old: dict | None) -> None:
        uid = (pod.get("metadata") or {}).get("uid", "")
        if kind == "DELETED":
            self._pods_by_uid.pop(uid, None)
        else:
            self._pods_by_uid[uid] = object_key(pod)
        extended = ((pod.get("status") or {}).get("extendedResourceClaimStatus") or {}).get("resourceClaimName")
        if not api.pod_claims(pod) and not extended:
            return
        if kind != "DELETED":
            self._queue.add(POD_KEY + object_key(pod))
        if kind == "DELETED" or pod_done(pod):
            namespace = (pod.get("metadata") or {}).get("namespace", "")
            names = [api.claim_name_of(pod, entry) for entry in api.pod_claims(pod)] + [extended]
            for name in names:
                if name:
                    self._queue.add(f"{CLAIM_KEY}{namespace}/{name}")

    def on_claim(self, kind: str, claim: dict, old: dict | None) -> None:
        if kind != "DELETED":
            self._queue.add(CLAIM_KEY + object_key(claim))

    def on_template(self, kind: str, template: dict, old: dict | None) -> None:
        if kind == "ADDED" and self._pods is not None:  # pods waiting for it (enqueuePodForTemplate)
            namespace = (template.get("metadata") or {}).get("namespace", "")
            for key, pod in self._pods.store.items():
                if key.startswith(namespace + "/") and api.pod_claims(pod):
                    self._queue.add(POD_KEY + key)

    # -- syncs ---------------------------------------------------------------------------------

    async def sync(self, key: str) -> None:
        """syncHandler: a "pod:" key syncs the pod, a "claim:" key the claim."""
        if key.startswith(POD_KEY):
            await self.sync_pod(key[len(POD_KEY):])
        else:
            await self.sync_claim(key[len(CLAIM_KEY):])

    def _owned_claim(self, pod: Mapping[str, Any], entry_name: str) -> Mapping[str, Any] | None:
        """findPodResourceClaim: a claim this pod owns, made for this entry."""
        uid = pod["metadata"].get("uid")
        namespace = pod["metadata"].get("namespace", "")
        for key, claim in (self._claims.store.items() if self._claims else []):
            if not key.startswith(namespace + "/") or owner_pod_uid(claim) != uid:
                continue
            if ((claim.get("metadata") or {}).get("annotations") or {}).get(api.POD_CLAIM_NAME_ANNOTATION) == entry_name:
                return claim
        return None

    async def sync_pod(self, key: str) -> None:
        pod = self._pods.store.get(key) if self._pods else None
        if pod is None or pod_done(pod) or (pod.get("metadata") or {}).get("deletionTimestamp"):
            return
        namespace = pod["metadata"].get("namespace", "default")
        statuses = list((pod.get("status") or {}).get("resourceClaimStatuses") or [])
        known = {s.get("name") for s in statuses}
        added = False
        for entry in api.pod_claims(pod):
            template_name = entry.get("resourceClaimTemplateName")
            if not template_name or entry.get("name") in known:
                continue
            claim = self._owned_claim(pod, entry["name"])
            if claim is None:
                template = self._templates.store.get(f"{namespace}/{template_name}") if self._templates else None
                if template is None:
                    log.info("pod %s: resource claim template %s not found", key, template_name)
                    return  # the template's ADDED event queues the pod again
                body = claim_from_template(pod, entry, template)
                async with self._http.post(f"{self.base_url}/apis/{api.API_VERSION}/namespaces/{namespace}/resourceclaims",
                                              json=body) as response:
                    created = await response.json(content_type=None)
                    if response.status >= 300:
                        raise RuntimeError(f"create claim for {key}: HTTP {response.status}: {created.get('message')}")
                claim = created
            statuses.append({"name": entry["name"], "resourceClaimName": claim["metadata"]["name"]})
            added = True
        if added:
            url = f"{self.base_url}/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}/status"
            async with self._http.patch(url, json={"status": {"resourceClaimStatuses": statuses}},
                                           headers={"Content-Type": MERGE_PATCH}) as response:
                await response.read()
                if response.status >= 300 and response.status != 404:
                    raise RuntimeError(f"status of {key}: HTTP {response.status}")

    def _pod_by_uid(self, uid: str) -> Mapping[str, Any] | None:
        key = self._pods_by_uid.get(uid)
        return self._pods.store.get(key) if key and self._pods else None

    async def sync_claim(self, key: str) -> None:
        """syncClaim: drop the reservations of pods that are gone or done; when that leaves none and
        the claim carries the delete-protection finalizer, deallocate it ("This has to be triggered
        by the transition from 'was being used' to 'is not used anymore' because a DRA driver is not
        required to set status.reservedFor together with status.allocation, i.e. a claim that is
        'currently unused' should not get deallocated"), then remove the finalizer; a claim without
        the finalizer stays allocated. An unreserved claim made for a pod that is done or gone is
        deleted."""
        claim = self._claims.store.get(key) if self._claims else None
        if claim is None:
            return
        namespace, name = key.split("/", 1)
        url = f"{self.base_url}/apis/{api.API_VERSION}/namespaces/{namespace}/resourceclaims/{name}"
        status = claim.get("status") or {}
        reserved = list(status.get("reservedFor") or [])
        keep = [ref for ref in reserved if ref.get("resource") != "pods" or not pod_done(self._pod_by_uid(ref.get("uid", "")))]
        finalizers = list((claim.get("metadata") or {}).get("finalizers") or [])
        if len(keep) < len(reserved):
            new_status = dict(status, reservedFor=keep)
            if not keep:
                new_status.pop("reservedFor")
                if api.FINALIZER in finalizers:  # allocated by the scheduler: "deallocate" by clearing it
                    new_status.pop("allocation", None)
                    new_status.pop("devices", None)  # dropDeallocatedStatusDevices
            async with self._http.put(f"{url}/status", json=dict(claim, status=new_status)) as response:
                updated = await response.json(content_type=None)
                if response.status in (404, 409):
                    return  # gone, or changed: its next event queues it again
                if response.status >= 300:
                    raise RuntimeError(f"status of claim {key}: HTTP {response.status}")
            if api.FINALIZER in finalizers and not (updated.get("status") or {}).get("allocation"):
                meta = dict(updated["metadata"], finalizers=[f for f in finalizers if f != api.FINALIZER])
                async with self._http.put(url, json=dict(updated, metadata=meta)) as response:
                    await response.read()
                    if response.status >= 300 and response.status not in (404, 409):
                        raise RuntimeError(f"finalizer of claim {key}: HTTP {response.status}")
            return  # the update's event queues the claim again for what follows
        owner = owner_pod_uid(claim)
        if owner is not None and pod_done(self._pod_by_uid(owner)) and not keep:
            async with self._http.delete(url, json={"preconditions": {"uid": claim["metadata"]["uid"]}}) as response:
                await response.read()

    async def run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=30)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            self._session = session
            self._templates = reflector_for(session, self.base_url, f"/apis/{api.API_VERSION}/resourceclaimtemplates",
                                            self.on_template, self.shared)
            self._claims = reflector_for(session, self.base_url, _CLAIMS, self.on_claim, self.shared)
            self._pods = reflector_for(session, self.base_url, "/api/v1/pods", self.on_pod, self.shared)
            tasks = [asyncio.ensure_future(r.run()) for r in (self._templates, self._claims)]
            try:
                await self._templates.synced.wait()
                await self._claims.synced.wait()
                tasks.append(asyncio.ensure_future(self._pods.run()))
                await self._pods.synced.wait()
                tasks.append(asyncio.ensure_future(self._queue.run(self.sync, log, "resource claim",
                                                                   workers=CONCURRENT_SYNCS)))
                self.ready.set()
                await asyncio.gather(*tasks)
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
