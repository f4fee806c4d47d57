"""Holding a released DRA gang's devices: before the gates go, each member's template claims are
allocated on its planned node (core.state.dra_hold decides how), as kube-scheduler's bindClaim
writes an allocation: the finalizer `resource.kubernetes.io/delete-protection` added in an update
of the claim, then `status.allocation` in an update of its status (RBAC: `update` on
`resourceclaims` and `resourceclaims/status`, and from Kubernetes 1.36, where
DRAResourceClaimGranularStatusAuthorization checks who writes an allocation, on the synthetic
`resourceclaims/binding`; deploy/ grants all three). The scheduler then only checks each
member's node against its claims' nodeSelector and adds the member to `status.reservedFor`; no
other pod is given those devices.

A release that does not go ahead (a failed validation, a plan lost) gives back what it
allocated: the allocation cleared while no pod has reserved the claim, then the finalizer."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ganggate.core.state import dra_hold
from ganggate.kube.calls import ApiCallError, Backoff, call_json, with_retries

log = logging.getLogger(__name__)

BACKOFF = Backoff(base=0.05, cap=1.0, attempts=4)


class DeviceHolder:
    """Allocates a pinned release's template claims on their planned nodes (`hold`), and takes
    back what a release that did not go ahead allocated (`give_back`)."""

    def __init__(self, api_client: Any, state: Any, metrics: Any = None) -> None:
        from kubernetes_asyncio import client

        self.api = client.ResourceV1Api(api_client)
        self.state = state
        self.metrics = metrics
        self.enabled = True
        self._written: dict[str, dict[str, Any]] = {}  # claim key -> the allocation this holder wrote

    def unready(self, placement: dict[str, str | None], pods: dict[str, Any]) -> str | None:
        """Why the members' devices cannot be held yet (a claim the resourceclaim controller has
        not made), checked before any write of the release; None when they can be tried."""
        if not self.enabled or not self.state.dra.active:
            return None
        for member in dra_hold.members_of(placement, pods):
            for entry in member.entries:
                if self.state.dra.claim_of(member.uid, entry) is None:
                    return f"the claim {entry} of {member.pod_key} is not made yet"
        return None

    async def hold(self, placement: dict[str, str | None], pods: dict[str, Any]) -> tuple[str | None, list[str]]:
        """Allocate the members' claims; (why the plan cannot be held, or None; the claims written)."""
        if not self.enabled or not self.state.dra.active:
            return None, []
        members = dra_hold.members_of(placement, pods)
        if not members:
            return None, []
        holds = dra_hold.plan_holds(self.state.dra, members)
        if isinstance(holds, str):
            return holds, []
        if holds.stale:  # an earlier release's allocations elsewhere: free them, then plan again
            await self.give_back(holds.stale)
            return f"{len(holds.stale)} claim(s) held on other nodes by an earlier release were given back", []
        for pod_key, why in sorted(holds.left.items()):
            log.info("the devices of %s are left to the scheduler: %s", pod_key, why)
        keys = sorted(holds.allocate)
        results = await asyncio.gather(*(self._allocate(key, holds.allocate[key]) for key in keys))
        written = [key for key, (ok, _) in zip(keys, results, strict=True) if ok]
        failed = [why for ok, why in results if not ok]
        if failed:
            return failed[0], written
        return None, written

    async def _allocate(self, key: str, allocation: dict[str, Any]) -> tuple[bool, str]:
        namespace, name = key.split("/", 1)
        claim = self.state.dra.claims.get(key)
        for attempt in range(4):
            if claim is None or attempt:
                try:
                    claim = await with_retries(lambda: call_json(
                        self.api.read_namespaced_resource_claim, name, namespace, verb="get", metrics=self.metrics), BACKOFF)
                except ApiCallError as exc:
                    return False, f"claim {key}: {exc}"
            assert claim is not None
            meta = claim.get("metadata") or {}
            if meta.get("deletionTimestamp"):
                return False, f"claim {key} is being deleted"
            if (claim.get("status") or {}).get("allocation"):
                return False, f"claim {key} was allocated meanwhile"
            try:
                if dra_hold.FINALIZER not in (meta.get("finalizers") or []):
                    body = dict(claim, metadata=dict(meta, finalizers=[*(meta.get("finalizers") or []), dra_hold.FINALIZER]))
                    claim = await call_json(self.api.replace_namespaced_resource_claim, name, namespace, body,
                                            verb="update", metrics=self.metrics)
                body = dict(claim, status=dict(claim.get("status") or {}, allocation=allocation))
                await call_json(self.api.replace_namespaced_resource_claim_status, name, namespace, body,
                                verb="update", metrics=self.metrics)
                self._written[key] = allocation
                return True, ""
            except ApiCallError as exc:
                if exc.status == 409 and attempt < 3:
                    continue  # changed meanwhile (the resourceclaim controller, the pod's status): read again
                return False, f"claim {key}: {exc}"
        return False, f"claim {key} kept changing"

    def contested(self, keys: list[str]) -> str | None:
        """Once the watch has caught up (the release's confirm step): a device of the claims
        written that another claim's allocation holds too, the scheduler having chosen it for an
        ordinary pod before it saw ours; the release then gives its allocations back."""
        written = {key: self._written[key] for key in keys if key in self._written}
        for key in keys:
            self._written.pop(key, None)
        return dra_hold.contested(self.state.dra, written)

    async def give_back(self, keys: list[str]) -> None:
        """Deallocate claims this holder allocated for a release that did not go ahead."""
        await asyncio.gather(*(self._give_back(key) for key in keys))

    async def _give_back(self, key: str) -> None:
        namespace, name = key.split("/", 1)
        for _ in range(4):
            try:
                claim = await call_json(self.api.read_namespaced_resource_claim, name, namespace, verb="get",
                                        metrics=self.metrics)
                status = dict(claim.get("status") or {})
                if status.get("reservedFor"):
                    return  # a pod uses it now: the resourceclaim controller deallocates it after that pod
                if status.pop("allocation", None) is not None:
                    claim = await call_json(self.api.replace_namespaced_resource_claim_status, name, namespace,
                                            dict(claim, status=status), verb="update", metrics=self.metrics)
                meta = claim.get("metadata") or {}
                if dra_hold.FINALIZER in (meta.get("finalizers") or []):
                    finalizers = [f for f in meta["finalizers"] if f != dra_hold.FINALIZER]
                    await call_json(self.api.replace_namespaced_resource_claim, name, namespace,
                                    dict(claim, metadata=dict(meta, finalizers=finalizers)), verb="update",
                                    metrics=self.metrics)
                return
            except ApiCallError as exc:
                if exc.status == 404:
                    return
                if exc.status != 409:
                    log.warning("giving back the devices of claim %s: %s", key, exc)
                    return
