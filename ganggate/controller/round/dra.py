"""The controller's watches of DRA objects (resource.k8s.io/v1): DeviceClasses, ResourceSlices,
ResourceClaims and ResourceClaimTemplates, fed to ClusterState.apply_dra (core.state.dra) in
order with the node and pod events. A relist applies what is gone as deleted, then the rest.
On a cluster without the resource.k8s.io/v1 API the lists fail and are retried; nothing is counted."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from ganggate.controller.round.informer import Informer, object_key
from ganggate.core.state import dra as dra_state


class DraWatches:
    """Four informers, one per DRA kind; `apply(change, *args)` is the loop's ChangeBuffer.apply."""

    def __init__(self, api_client: Any, state_apply: Callable[[str, str, dict], None],
                 buffer_apply: Callable[..., None], poke: Callable[[], None], metrics: Any = None) -> None:
        from kubernetes_asyncio import client

        api = self._api = client.ResourceV1Api(api_client)
        self.absent = False  # the cluster serves no resource.k8s.io/v1: nothing to watch
        self._state_apply = state_apply
        self._buffer_apply = buffer_apply
        self._poke = poke
        self._known: dict[str, set[str]] = {kind: set() for kind in dra_state.KINDS}
        lists: dict[str, Callable[..., Any]] = {
            dra_state.CLASSES: api.list_device_class,
            dra_state.SLICES: api.list_resource_slice,
            dra_state.CLAIMS: api.list_resource_claim_for_all_namespaces,
            dra_state.TEMPLATES: api.list_resource_claim_template_for_all_namespaces,
        }
        self.informers = [
            Informer(list_fn, kind, on_list=self._on_list(kind), on_event=self._on_event(kind),
                     metrics=metrics, keep_store=False)
            for kind, list_fn in lists.items()
        ]

    @property
    def synced(self) -> bool:
        return self.absent or all(i.synced for i in self.informers)

    def _on_list(self, kind: str) -> Callable[[list[dict]], None]:
        def on_list(objects: list[dict]) -> None:
            keys = {object_key(o) for o in objects}
            for gone in sorted(self._known[kind] - keys):
                namespace, _, name = gone.rpartition("/")
                meta = {"name": name, **({"namespace": namespace} if namespace else {})}
                self._buffer_apply(self._state_apply, kind, "DELETED", {"metadata": meta})
            self._known[kind] = keys
            for obj in objects:
                self._buffer_apply(self._state_apply, kind, "ADDED", obj)
            self._poke()
        return on_list

    def _on_event(self, kind: str) -> Callable[[str, dict], None]:
        def on_event(event_type: str, obj: dict) -> None:
            key = object_key(obj)
            if event_type == "DELETED":
                self._known[kind].discard(key)
            else:
                self._known[kind].add(key)
            self._buffer_apply(self._state_apply, kind, event_type, obj)
            self._poke()
        return on_event

    async def run(self) -> None:
        """Keep the four kinds watched (until cancelled); on a cluster without the API, idle."""
        from kubernetes_asyncio.client.exceptions import ApiException

        try:
            await self._api.list_device_class(limit=1)
        except ApiException as exc:
            if exc.status != 404:
                raise
            self.absent = True
            self._poke()
            await asyncio.Event().wait()
        tasks = [asyncio.ensure_future(i.run()) for i in self.informers]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


async def list_into(api_client: Any, state: Any) -> None:
    """List the four DRA kinds once into a ClusterState (`ganggate status`, `plan`): before its
    nodes and pods, so that their devices and claims are known when those are read. A cluster
    without resource.k8s.io/v1 has nothing to add."""
    from kubernetes_asyncio import client

    from ganggate.kube.calls import ApiCallError, call_json

    api = client.ResourceV1Api(api_client)
    lists = ((dra_state.CLASSES, api.list_device_class), (dra_state.SLICES, api.list_resource_slice),
             (dra_state.TEMPLATES, api.list_resource_claim_template_for_all_namespaces),
             (dra_state.CLAIMS, api.list_resource_claim_for_all_namespaces))
    for kind, list_fn in lists:
        try:
            body = await call_json(list_fn, verb="list", timeout=60.0)
        except ApiCallError as exc:
            if exc.status == 404:
                return
            raise
        for obj in body.get("items") or []:
            state.apply_dra(kind, "ADDED", obj)
