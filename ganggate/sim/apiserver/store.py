"""The in-memory object store: one global resourceVersion, indexes, and change events.

Like etcd behind kube-apiserver, every write bumps a single cluster-wide revision that becomes the
object's metadata.resourceVersion (a string of an integer), and every write emits a watch event.
Objects are stored as plain dicts that are never mutated once stored (a write stores a new dict),
so their serialized bytes are cached and shared by lists, gets and watch events. Pods are indexed
by namespace and by spec.nodeName. Validation and admission live in the API layer, not here.
"""

from __future__ import annotations

import builtins
import uuid
from collections.abc import Iterator
from typing import Any

from ganggate.sim.apimachinery import errors
from ganggate.sim.apimachinery.timestamps import now_rfc3339
from ganggate.sim.apiserver.discovery import ResourceInfo, by_key
from ganggate.sim.apiserver.watch import Event, Stored, WatchHub, clone

Key = tuple[str, str]
"""(namespace, name); namespace is "" for cluster-scoped objects."""


def _type_first(obj: dict[str, Any], info: ResourceInfo) -> dict[str, Any]:
    """The object with apiVersion and kind as its first keys (so list items can drop them cheaply)."""
    rest = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
    return {"apiVersion": obj.get("apiVersion") or info.api_version, "kind": obj.get("kind") or info.kind, **rest}


class Store:
    """Objects by resource key (`pods`, `leases.coordination.k8s.io`), with a watch hub."""

    def __init__(self, watch_history: int = 10000, epoch: Any = None) -> None:
        # epoch: the API server's clock as Unix seconds (a callable; default the real time), for
        # creationTimestamp (ganggate.sim.clock: a replay's simulated clock).
        self.epoch = epoch
        self._objects: dict[str, dict[Key, Stored]] = {}
        self._by_namespace: dict[str, dict[str, dict[Key, Stored]]] = {}
        self._pods_by_node: dict[str, set[Key]] = {}
        self._sorted: dict[tuple[str, str | None], list[Key]] = {}
        self._rv = 0
        self._written: dict[str, int] = {}  # resource key -> the revision of its last write
        self.hub = WatchHub(history=watch_history)

    def timestamp(self) -> str:
        """Now on the API server's clock, as it stamps objects."""
        return now_rfc3339(None if self.epoch is None else self.epoch())

    # ---- read access -------------------------------------------------------------------------
    @property
    def resource_version(self) -> int:
        """The current global resourceVersion (the revision of the last write)."""
        return self._rv

    def get(self, resource: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        """A copy of one object, or None (for tests and in-process callers)."""
        stored = self.lookup(by_key(resource).key, namespace or "", name)
        return clone(stored.obj) if stored else None

    def list(self, resource: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """Copies of the objects of a resource, in one namespace or all, sorted by namespace/name."""
        return [clone(s.obj) for _, s in self.iter(by_key(resource).key, namespace)]

    def lookup(self, key: str, namespace: str, name: str) -> Stored | None:
        return self._objects.get(key, {}).get((namespace, name))

    def count(self, key: str) -> int:
        return len(self._objects.get(key, {}))

    def last_write(self, key: str) -> int:
        """The revision of the last create, update or delete of the resource (0: none yet): what was
        derived from its objects still holds while this is unchanged."""
        return self._written.get(key, 0)

    def iter(self, key: str, namespace: str | None = None, after: Key | None = None) -> Iterator[tuple[Key, Stored]]:
        """Objects of a resource in key order (namespace, name), optionally only those after `after`."""
        import bisect

        if namespace is not None and by_key(key).namespaced:
            objects = self._by_namespace.get(key, {}).get(namespace, {})
        else:
            objects = self._objects.get(key, {})
            namespace = None
        keys = self._sorted.get((key, namespace))
        if keys is None:
            keys = self._sorted[(key, namespace)] = sorted(objects)
        start = bisect.bisect_right(keys, after) if after is not None else 0
        for index in range(start, len(keys)):
            stored = objects.get(keys[index])
            if stored is not None:
                yield keys[index], stored

    def iter_node_pods(self, node_name: str, namespace: str | None = None,
                       after: Key | None = None) -> Iterator[tuple[Key, Stored]]:
        """Pods bound to a node (the spec.nodeName index), in key order, optionally after a key."""
        pods = self._objects.get("pods", {})
        for k in sorted(self._pods_by_node.get(node_name, ())):
            if (namespace is None or k[0] == namespace) and (after is None or k > after) and k in pods:
                yield k, pods[k]

    def pods_on_node(self, node_name: str) -> builtins.list[dict[str, Any]]:
        """The pods bound to a node (spec.nodeName index), shared objects: do not mutate."""
        pods = self._objects.get("pods", {})
        return [pods[k].obj for k in sorted(self._pods_by_node.get(node_name, ())) if k in pods]

    # ---- writes --------------------------------------------------------------------------------
    def _next_rv(self) -> int:
        self._rv += 1
        return self._rv

    def _index(self, key: str, k: Key, stored: Stored | None, old: Stored | None) -> None:
        if key != "pods":
            return
        old_node = ((old.obj.get("spec") or {}).get("nodeName") or "") if old else ""
        new_node = ((stored.obj.get("spec") or {}).get("nodeName") or "") if stored else ""
        if old_node == new_node:
            return
        if old_node:
            bucket = self._pods_by_node.get(old_node)
            if bucket is not None:
                bucket.discard(k)
                if not bucket:
                    del self._pods_by_node[old_node]
        if new_node:
            self._pods_by_node.setdefault(new_node, set()).add(k)

    def _forget_order(self, key: str, namespace: str) -> None:
        self._sorted.pop((key, None), None)
        self._sorted.pop((key, namespace), None)

    def create(self, resource: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Store a new object, filling uid, creationTimestamp and resourceVersion; emits ADDED.

        The caller hands over ownership of `obj`. 409 AlreadyExists when the name is taken.
        """
        info = by_key(resource)
        meta = obj.setdefault("metadata", {})
        namespace = meta.get("namespace", "") if info.namespaced else ""
        k = (namespace, meta["name"])
        objects = self._objects.setdefault(info.key, {})
        if k in objects:
            raise errors.already_exists(info.plural, meta["name"], info.group)
        rv = self._next_rv()
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", self.timestamp())
        meta["resourceVersion"] = str(rv)
        obj = _type_first(obj, info)
        stored = Stored(obj)
        objects[k] = stored
        self._written[info.key] = rv
        self._forget_order(info.key, namespace)
        if info.namespaced:
            self._by_namespace.setdefault(info.key, {}).setdefault(namespace, {})[k] = stored
        self._index(info.key, k, stored, None)
        self.hub.publish(Event(rv, "ADDED", info.key, namespace, stored, None))
        return obj

    def update(self, resource: str, obj: dict[str, Any], expect_rv: str | None = None) -> dict[str, Any]:
        """Replace an existing object; emits MODIFIED. 404 if missing, 409 Conflict on a stale rv."""
        info = by_key(resource)
        meta = obj["metadata"]
        namespace = meta.get("namespace", "") if info.namespaced else ""
        k = (namespace, meta["name"])
        objects = self._objects.get(info.key, {})
        old = objects.get(k)
        if old is None:
            raise errors.not_found(info.plural, meta["name"], info.group)
        if expect_rv and expect_rv != old.obj["metadata"]["resourceVersion"]:
            raise errors.stale(info.plural, meta["name"], info.group)
        rv = self._next_rv()
        meta["resourceVersion"] = str(rv)
        obj = _type_first(obj, info)
        stored = Stored(obj)
        objects[k] = stored
        self._written[info.key] = rv
        if info.namespaced:
            self._by_namespace[info.key][namespace][k] = stored
        self._index(info.key, k, stored, old)
        self.hub.publish(Event(rv, "MODIFIED", info.key, namespace, stored, old))
        return obj

    def delete(self, resource: str, namespace: str | None, name: str, expect_uid: str | None = None,
               expect_rv: str | None = None) -> dict[str, Any]:
        """Remove an object; emits DELETED carrying its last state at the deletion's resourceVersion."""
        info = by_key(resource)
        namespace = (namespace or "") if info.namespaced else ""
        k = (namespace, name)
        objects = self._objects.get(info.key, {})
        old = objects.get(k)
        if old is None:
            raise errors.not_found(info.plural, name, info.group)
        old_meta = old.obj["metadata"]
        if expect_uid and expect_uid != old_meta.get("uid"):
            raise errors.conflict(
                info.plural, name,
                f"Precondition failed: UID in precondition: {expect_uid}, UID in object meta: {old_meta.get('uid')}",
                info.group,
            )
        if expect_rv and expect_rv != old_meta.get("resourceVersion"):
            raise errors.conflict(
                info.plural, name,
                f"Precondition failed: ResourceVersion in precondition: {expect_rv}, "
                f"ResourceVersion in object meta: {old_meta.get('resourceVersion')}",
                info.group,
            )
        rv = self._next_rv()
        del objects[k]
        self._written[info.key] = rv
        self._forget_order(info.key, namespace)
        if info.namespaced:
            del self._by_namespace[info.key][namespace][k]
        self._index(info.key, k, None, old)
        last = dict(old.obj)
        last["metadata"] = dict(old_meta, resourceVersion=str(rv))
        self.hub.publish(Event(rv, "DELETED", info.key, namespace, Stored(last), old))
        return last

    def compact(self) -> int:
        """Forget watch history up to now (as an etcd compaction); returns the compacted revision."""
        self.hub.compact(self._rv)
        return self._rv

    def namespaced_keys(self) -> builtins.list[ResourceInfo]:
        return [by_key(k) for k in self._objects if by_key(k).namespaced]
