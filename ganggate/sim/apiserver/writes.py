"""The write verbs of kubesim's API server over the Store: create, update, patch, bind, evict and
delete, in the real server's order (k8s.io/apiserver/pkg/endpoints/handlers/create.go, update.go,
patch.go, delete.go; k8s.io/apiserver/pkg/registry/generic/registry/store.go): decode + default ->
mutating admission (CREATE/UPDATE, not subresources) -> strategy PrepareForCreate /
PrepareForUpdate -> validation -> validating admission by ValidatingAdmissionPolicies -> store.

Why this module is long: the create, update and patch pipelines share their admission, defaulting
and conflict-retry steps, and binding, eviction and the deletes share their preconditions.
"""

from __future__ import annotations

import json
import random
from typing import Any

from aiohttp import web

from ganggate.sim.api import scheduling
from ganggate.sim.apimachinery import errors, selectors, semantic
from ganggate.sim.apiserver import decoding, deletion, discovery, eviction, fieldvalidation, strategies, validation
from ganggate.sim.apiserver import patch as patching
from ganggate.sim.apiserver import propagation as gc
from ganggate.sim.apiserver.admission import policy as admission_policy
from ganggate.sim.apiserver.admission import priority
from ganggate.sim.apiserver.discovery import ResourceInfo
from ganggate.sim.apiserver.registry import resource as resource_strategy
from ganggate.sim.apiserver.registry import service as services
from ganggate.sim.apiserver.registry import workload
from ganggate.sim.apiserver.requests import (
    _NAME_ALPHABET,
    IMMORTAL_NAMESPACES,
    MAX_UPDATE_ATTEMPTS,
    USER_INFO,
    ObjectChanged,
    Target,
    _dry_run,
    _json_response,
    _status_success,
    _warned,
)
from ganggate.sim.apiserver.store import Store
from ganggate.sim.apiserver.watch import Stored, clone, dumps
from ganggate.sim.componentbase.featuregate import FeatureGates


class Writes:
    """The write pipeline; mixed into ApiServer, whose store, admission chain and clock it uses."""

    _policies: admission_policy.PolicyChain | None = None  # made on first use
    # What it uses of the ApiServer it is mixed into (set in ApiServer.__init__).
    store: Store
    feature_gates: FeatureGates

    def admission(self) -> Any:
        raise NotImplementedError  # ApiServer's: the mutating admission chain, loaded lazily

    # ---- writes: shared pieces ----------------------------------------------------------------------------
    def _check_body(self, target: Target, body: Any, expected_kind: str | None = None) -> dict[str, Any]:
        info = target.info
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request must be a JSON object")
        kind = expected_kind or info.kind
        api_version = body.get("apiVersion")
        expected_version: str | None = info.api_version
        if expected_kind in ("Binding",):
            expected_version = "v1"
        if expected_kind == "Eviction":
            expected_version = None  # policy/v1 or policy/v1beta1
        if api_version and expected_version and api_version != expected_version:
            raise errors.bad_request(
                f"the API version in the data ({api_version}) does not match the expected API version ({expected_version})")
        if body.get("kind") and body["kind"] != kind:
            raise errors.bad_request(f"the kind in the data ({body['kind']}) does not match the expected kind ({kind})")
        meta = body.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise errors.bad_request("metadata must be an object")
        if info.namespaced and target.namespace is not None:
            if meta.get("namespace") and meta["namespace"] != target.namespace:
                raise errors.bad_request("the namespace of the provided object does not match the namespace sent on the request")
            meta["namespace"] = target.namespace
        return body

    def _require_namespace(self, namespace: str | None) -> None:
        """NamespaceLifecycle admission: no namespaced object in a namespace that does not exist."""
        if namespace and self.store.lookup("namespaces", "", namespace) is None:
            raise errors.not_found("namespaces", namespace)

    def _default(self, info: ResourceInfo, obj: dict[str, Any]) -> None:
        if info.kind == "Pod" and info.group == "":
            validation.default_pod(obj)
        elif info.kind == "Node":
            validation.default_node(obj)
        elif info.kind == "Namespace":
            validation.default_namespace(obj)
        elif (strategy := strategies.for_key(info.key)) is not None:
            strategy.default(obj)

    async def _admit(self, operation: str, target: Target, obj: dict[str, Any], old: dict[str, Any] | None,
                     dry_run: bool) -> dict[str, Any]:
        """Mutating admission (kubesim/apiserver/admission/chain.py), then defaulting again as after decode.
        Webhooks are never called for admissionregistration.k8s.io objects (generic/webhook.go
        IsExemptAdmissionConfigurationResource); kubesim calls none for subresources."""
        info = target.info
        if target.subresource is not None or info.group == "admissionregistration.k8s.io":
            return obj
        chain = self.admission()
        if chain is None or not (self.store.count("mutatingwebhookconfigurations.admissionregistration.k8s.io")
                                 or self.store.count("mutatingadmissionpolicybindings.admissionregistration.k8s.io")):
            return obj  # no webhook configured and no policy bound: the chain could not change anything
        meta = obj.get("metadata") or {}
        try:
            result = await self._call_chain(chain, operation, info, meta, obj, old, dry_run)
        except errors.ApiError:
            raise
        except Exception as exc:
            code = getattr(exc, "code", None)
            if isinstance(code, int) and hasattr(exc, "message"):
                # AdmissionDenied: served as the Status the chain describes.
                details = getattr(exc, "details", None) or {}
                raise errors.ApiError(
                    code, str(getattr(exc, "reason", "") or ""), str(getattr(exc, "message", "")),
                    name=details.get("name"), group=details.get("group"), kind=details.get("kind"),
                ) from exc
            raise
        self._default(info, result)
        return result

    @staticmethod
    async def _call_chain(chain: Any, operation: str, info: ResourceInfo, meta: dict[str, Any], obj: dict[str, Any],
                          old: dict[str, Any] | None, dry_run: bool) -> dict[str, Any]:
        return await chain.admit(
            operation=operation,
            kind={"group": info.group, "version": info.version, "kind": info.kind},
            resource={"group": info.group, "version": info.version, "resource": info.plural},
            sub_resource=None,
            namespace=meta.get("namespace", ""),
            name=meta.get("name", ""),
            obj=obj,
            old_obj=old,
            dry_run=dry_run,
            user_info=USER_INFO,
        )

    def _stored_namespace(self, name: str) -> dict[str, Any] | None:
        """The stored namespace itself, for admission, which only reads it (its labels, namespaceObject):
        no copy per lookup. A stored object is never mutated in place."""
        stored = self.store.lookup("namespaces", "", name)
        return stored.obj if stored is not None else None

    def _validate_policies(self, operation: str, target: Target, obj: dict[str, Any] | None,
                           old: dict[str, Any] | None, dry_run: bool) -> None:
        """Validating admission by ValidatingAdmissionPolicies (apiserver/admission/policy.py), after the
        object's own validation and before storage, as store.go's create/update/deleteValidation."""
        if self._policies is None:
            self._policies = admission_policy.PolicyChain(
                lambda key: [stored.obj for _, stored in self.store.iter(key)], self.store.count,
                self._stored_namespace, lambda key: self.store.last_write(key))
        info = target.info
        meta = (obj if obj is not None else old or {}).get("metadata") or {}
        admission_policy.add_warnings(self._policies.validate(admission_policy.Request(
            operation, {"group": info.group, "version": info.version, "kind": info.kind},
            {"group": info.group, "version": info.version, "resource": info.plural}, target.subresource,
            meta.get("namespace", "") if info.namespaced else "", meta.get("name") or target.name or "",
            obj, old, dry_run, USER_INFO)))

    def _invalid(self, info: ResourceInfo, obj: dict[str, Any], causes: list[errors.Cause]) -> errors.ApiError:
        name = (obj.get("metadata") or {}).get("name") or ""
        return errors.invalid(info.kind, name, causes, info.group)

    # ---- create ------------------------------------------------------------------------------------------
    async def create_object(self, target: Target, body: dict[str, Any], dry_run: bool = False) -> dict[str, Any]:
        """The create pipeline (also used in-process by the Simulator)."""
        info = target.info
        obj = self._check_body(target, body)
        meta = obj["metadata"]
        if meta.get("resourceVersion"):
            # etcd3 store Create (k8s.io/apiserver/pkg/storage/etcd3/store.go).
            raise errors.internal_error("resourceVersion should not be set on objects to be created")
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + "".join(random.choice(_NAME_ALPHABET) for _ in range(5))
        if info.namespaced:
            self._require_namespace(meta.get("namespace"))
        obj.setdefault("apiVersion", info.api_version)
        obj.setdefault("kind", info.kind)
        self._default(info, obj)
        if info.key == "pods":
            validation.default_toleration_seconds(obj)
        priority.admit(self.store, "CREATE", info.key, obj)  # the Priority admission plugin
        obj = await self._admit("CREATE", target, obj, None, dry_run)
        meta = obj.setdefault("metadata", {})
        # rest.BeforeCreate: system fields are the server's.
        for field in ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds"):
            meta.pop(field, None)
        if info.key == "pods":
            # SchedulingGated's lastTransitionTime: podutil.UpdatePodCondition's metav1.Now(), the
            # server's clock, as creationTimestamp (pkg/registry/core/pod/strategy.go PrepareForCreate).
            validation.prepare_pod_create(obj, self.store.timestamp())
            workload.drop_disabled_pod_fields(obj, None, self.feature_gates.enabled(scheduling.GENERIC_WORKLOAD))
        elif info.key == "mutatingwebhookconfigurations.admissionregistration.k8s.io":
            meta["generation"] = 1
        strategy = strategies.for_key(info.key)
        if strategy is not None:
            strategy.prepare_create(obj)
        if info.key == resource_strategy.DEVICE_CLASSES:  # dropDisabledFields
            resource_strategy.drop_disabled_class_fields(obj, self.feature_gates.enabled("DRAExtendedResource"))
        validation.drop_empty(obj)
        causes = strategy.validate(obj) if strategy is not None else validation.validate_create(info.kind, obj, info.namespaced)
        causes += workload.gated_create_causes(info.key, obj, self.feature_gates)
        if not causes and info.key == "services":
            # The REST storage allocates after validation (pkg/registry/core/service/storage/storage.go beginCreate).
            others = (stored.obj for _, stored in self.store.iter("services"))
            causes = services.allocate(obj, others)
        if causes:
            raise self._invalid(info, obj, causes)
        self._validate_policies("CREATE", target, obj, None, dry_run)
        if info.namespaced:
            self._require_namespace(meta.get("namespace"))
        if dry_run:
            if self.store.lookup(info.key, meta.get("namespace", "") if info.namespaced else "", meta["name"]):
                raise errors.already_exists(info.plural, meta["name"], info.group)
            meta.setdefault("uid", _uuid())
            meta.setdefault("creationTimestamp", self.store.timestamp())
            return obj
        return self.store.create(info.key, obj)

    async def _create(self, target: Target, body: Any, query: dict[str, str]) -> web.Response:
        dry_run = _dry_run(query)
        info = target.info
        if target.subresource == "binding":
            return self._bind(target, body, dry_run)
        if info.key == "bindings":
            if target.name is not None or target.namespace is None:
                raise errors.method_not_allowed("POST", info.plural)
            name = (body.get("metadata") or {}).get("name") if isinstance(body, dict) else None
            if not name:
                raise errors.invalid("Binding", "", [errors.required("metadata.name", "name or generateName is required")])
            pods = discovery.by_key("pods")
            return self._bind(Target(pods, target.namespace, name, "binding"), body, dry_run)
        if target.subresource == "eviction":
            return self._evict(target, body, dry_run)
        if target.name is not None:
            raise errors.method_not_allowed("POST", info.plural)
        if info.namespaced and target.namespace is None:
            raise errors.method_not_allowed("POST", info.plural)
        decoding.check(info.group, info.version, info.kind, body)
        warnings = fieldvalidation.check(info.group, info.version, info.kind, body, fieldvalidation.directive(query))
        created = await self.create_object(target, body, dry_run)
        return _warned(_json_response(created, status=201), warnings)

    # ---- update and patch ---------------------------------------------------------------------------------
    def _stored(self, target: Target) -> Stored:
        """The stored object (its dict and its serialized bytes), or 404."""
        info = target.info
        stored = self.store.lookup(info.key, target.namespace or "", target.name or "")
        if stored is None:
            raise errors.not_found(info.plural, target.name or "", info.group)
        return stored

    def _current(self, target: Target) -> dict[str, Any]:
        return self._stored(target).obj

    async def update_object(self, target: Target, new: dict[str, Any], dry_run: bool = False,
                            retry_on_change: bool = False) -> dict[str, Any]:
        """The update pipeline for the main resource and the status subresource.

        Raises ObjectChanged when the object was written while admission ran and the caller can
        redo the update against the new state: always for a patch (retry_on_change, the patch is
        re-applied), for an update only when it carries no resourceVersion precondition.
        """
        info = target.info
        new = self._check_body(target, new)
        meta = new["metadata"]
        if meta.get("name") and meta["name"] != target.name:
            raise errors.bad_request(f"the name of the object ({meta['name']}) does not match the name on the URL ({target.name})")
        meta["name"] = target.name
        old = self._current(target)
        old_meta = old["metadata"]
        expect = meta.get("resourceVersion") or None
        if expect is not None and expect != old_meta["resourceVersion"]:
            raise errors.stale(info.plural, target.name or "", info.group)
        new.setdefault("apiVersion", info.api_version)
        new.setdefault("kind", info.kind)
        # rest.BeforeUpdate: system fields come from the stored object; an update never
        # removes or changes a deletion timestamp or grace period.
        for field in ("uid", "creationTimestamp", "generation", "deletionTimestamp", "deletionGracePeriodSeconds"):
            if field in old_meta:
                meta[field] = old_meta[field]
            elif field.startswith("deletion"):
                meta.pop(field, None)
        self._default(info, new)
        strategy = strategies.for_key(info.key)
        if target.subresource == "status":
            if strategy is not None:
                strategy.prepare_status_update(new, old)
            validation.prepare_status_update(new, old)
        else:
            new = await self._admit("UPDATE", target, new, old, dry_run)
            priority.admit(self.store, "UPDATE", info.key, new)
            meta = new.setdefault("metadata", {})
            for field in ("uid", "creationTimestamp", "generation", "deletionTimestamp", "deletionGracePeriodSeconds"):
                if field in old_meta:
                    meta[field] = old_meta[field]
            if info.key == "pods":
                validation.prepare_pod_update(new, old)
                workload.drop_disabled_pod_fields(new, old, self.feature_gates.enabled(scheduling.GENERIC_WORKLOAD))
            elif strategy is not None:
                strategy.prepare_update(new, old)
                if info.key == resource_strategy.DEVICE_CLASSES:  # dropDisabledFields
                    resource_strategy.drop_disabled_class_fields(new, self.feature_gates.enabled("DRAExtendedResource"), old)
            else:
                validation.prepare_generic_update(info.kind, new, old)
                if info.key == "mutatingwebhookconfigurations.admissionregistration.k8s.io":
                    changed = semantic.normal(new.get("webhooks")) != semantic.normal(old.get("webhooks"))
                    meta["generation"] = old_meta.get("generation", 1) + (1 if changed else 0)
        validation.drop_empty(new)
        if strategy is not None:
            causes = validation.validate_object_meta_update(new, old) + strategy.validate_update(new, old)
        else:
            causes = validation.validate_update(info.kind, new, old, info.namespaced, target.subresource)
        if causes:
            raise self._invalid(info, new, causes)
        self._validate_policies("UPDATE", target, new, old, dry_run)
        latest = self.store.lookup(info.key, target.namespace or "", target.name or "")
        if latest is None:
            raise errors.not_found(info.plural, target.name or "", info.group)
        if latest.obj is not old:
            # Written meanwhile (while a webhook was called): a precondition fails; otherwise the
            # caller retries against the new state, as GuaranteedUpdate's tryUpdate loop does.
            if retry_on_change or expect is None:
                raise ObjectChanged()
            raise errors.stale(info.plural, target.name or "", info.group)
        meta["resourceVersion"] = old_meta["resourceVersion"]
        if new == old:
            # A no-op update writes nothing: same resourceVersion, no watch event (etcd3 GuaranteedUpdate).
            return old
        if dry_run:
            return new
        return self.store.update(info.key, new, expect_rv=old_meta["resourceVersion"])

    async def _update(self, target: Target, body: Any, query: dict[str, str]) -> web.Response:
        if target.name is None or target.subresource not in (None, "status"):
            raise errors.method_not_allowed("PUT", target.info.plural)
        dry_run = _dry_run(query)
        info = target.info
        decoding.check(info.group, info.version, info.kind, body)
        warnings = fieldvalidation.check(info.group, info.version, info.kind, body,
                                         fieldvalidation.directive(query, "UpdateOptions"))
        for _ in range(MAX_UPDATE_ATTEMPTS):
            try:
                return _warned(_json_response(await self.update_object(target, clone(body), dry_run)), warnings)
            except ObjectChanged:
                continue
        raise errors.stale(target.info.plural, target.name, target.info.group)

    async def _patch(self, target: Target, body: Any, content_type: str, query: dict[str, str]) -> web.Response:
        """Apply the patch to the current object and update; retried against the latest state when
        the object changes while admission runs (handlers/patch.go, maxRetryWhenPatchConflicts)."""
        if target.name is None or target.subresource not in (None, "status"):
            raise errors.method_not_allowed("PATCH", target.info.plural)
        dry_run = _dry_run(query)
        mode = fieldvalidation.directive(query, "PatchOptions")
        info = target.info
        for _ in range(MAX_UPDATE_ATTEMPTS):
            stored = self._stored(target)
            current = stored.obj
            original = json.loads(stored.raw)  # a copy to patch
            patched = patching.apply_patch(content_type, original, body, in_place=True)
            decoding.check(info.group, info.version, info.kind, patched, patch=True)
            warnings = fieldvalidation.check(info.group, info.version, info.kind, patched, mode, patch=True)
            meta = patched.get("metadata") if isinstance(patched.get("metadata"), dict) else None
            if meta is not None and meta.get("resourceVersion") and meta["resourceVersion"] != current["metadata"]["resourceVersion"]:
                raise errors.stale(target.info.plural, target.name, target.info.group)
            try:
                return _warned(_json_response(await self.update_object(target, patched, dry_run, retry_on_change=True)),
                               warnings)
            except ObjectChanged:
                continue
        raise errors.stale(target.info.plural, target.name, target.info.group)

    # ---- binding and eviction ------------------------------------------------------------------------------
    def _bind(self, target: Target, body: Any, dry_run: bool) -> web.Response:
        """pods/binding (pkg/registry/core/pod/storage/storage.go BindingREST.Create, assignPod)."""
        binding = self._check_body(Target(target.info, target.namespace, target.name, None), body, "Binding")
        name = binding["metadata"].get("name") or target.name
        if name != target.name:
            raise errors.bad_request(f"the name of the object ({name}) does not match the name on the URL ({target.name})")
        target_ref = binding.get("target") or {}
        causes = []
        if target_ref.get("kind") and target_ref["kind"] != "Node":
            causes.append(errors.not_supported("target.kind", target_ref["kind"], ["Node", "<empty>"]))
        if not target_ref.get("name"):
            causes.append(errors.required("target.name"))
        if causes:
            raise errors.invalid("Binding", name or "", causes)
        stored = self._stored(target)
        pod = stored.obj
        spec = pod.get("spec") or {}

        def refuse(detail: str) -> errors.ApiError:
            return errors.conflict("pods/binding", target.name or "", detail)

        if pod["metadata"].get("deletionTimestamp"):
            raise refuse(f"pod {target.name} is being deleted, cannot be assigned to a host")
        if spec.get("nodeName"):
            raise refuse(f'pod {target.name} is already assigned to node "{spec["nodeName"]}"')
        if spec.get("schedulingGates"):
            raise refuse(f"pod {target.name} has non-empty .spec.schedulingGates")
        uid = binding["metadata"].get("uid")
        if uid and uid != pod["metadata"].get("uid"):
            raise errors.conflict("pods", target.name or "",
                                  f"Precondition failed: UID in precondition: {uid}, UID in object meta: {pod['metadata'].get('uid')}")
        # The real server does not check that the node exists (setPodHostAndAnnotations).
        new = json.loads(stored.raw)  # a copy
        new["spec"]["nodeName"] = target_ref["name"]
        gates = getattr(self, "feature_gates", None)
        if gates is not None and gates.enabled("ClearingNominatedNodeNameAfterBinding"):
            (new.get("status") or {}).pop("nominatedNodeName", None)  # assignPod (beta, on in 1.35)
        annotations = binding["metadata"].get("annotations") or {}
        if annotations:
            new["metadata"].setdefault("annotations", {}).update(annotations)
        # assignPod (pkg/registry/core/pod/storage/storage.go): podutil.UpdatePodCondition stamps
        # metav1.Now(), the server's clock, as creationTimestamp.
        set_condition(new, {"type": "PodScheduled", "status": "True"}, self.store.timestamp())
        if not dry_run:
            self.store.update(target.info.key, new, expect_rv=pod["metadata"]["resourceVersion"])
        return _json_response(_status_success(201), status=201)

    def _evict(self, target: Target, body: Any, dry_run: bool) -> web.Response:
        """pods/eviction (ganggate/sim/apiserver/eviction.py): PodDisruptionBudgets, then the pod delete path."""
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request must be a JSON object")
        if body.get("kind") and body["kind"] != "Eviction":
            raise errors.bad_request(f"the kind in the data ({body['kind']}) does not match the expected kind (Eviction)")
        name = (body.get("metadata") or {}).get("name") or target.name
        if name != target.name:
            raise errors.bad_request("name in URL does not match name in Eviction object")
        eviction.evict(self.store, target.namespace or "", target.name or "", body,
                       lambda options: self._delete(target, options, {}), dry_run)
        return _json_response(_status_success(201), status=201)

    # ---- delete ------------------------------------------------------------------------------------------
    def _delete(self, target: Target, options: dict[str, Any], query: dict[str, str]) -> web.Response:
        info = target.info
        dry_run = _dry_run(query) or options.get("dryRun") == ["All"]
        current = self._current(target)
        preconditions = options.get("preconditions") or {}
        if info.key == "namespaces" and target.name in IMMORTAL_NAMESPACES:
            raise errors.ApiError(403, "Forbidden", f'namespaces "{target.name}" is forbidden: this namespace may not be deleted',
                                  name=target.name, kind="namespaces")
        self._validate_policies("DELETE", target, None, current, dry_run)
        strategy = strategies.for_key(info.key)
        policy = gc.propagation_policy(options, query, strategy.default_delete_policy if strategy else "Background")
        if info.key == "pods":
            # Graceful deletion (ganggate/sim/apiserver/deletion.py); pods own no dependents kubesim collects.
            obj, gone = deletion.delete_pod(self.store, target.namespace or "", target.name or "", options, query, dry_run)
            accepted = not gone and options.get("orphanDependents") is False  # handlers/delete.go
            return _json_response(obj, status=202 if accepted else 200)
        if dry_run:
            return _json_response(None, raw=self._stored(target).raw)
        meta = current["metadata"]
        if (preconditions.get("uid") in (None, meta.get("uid"))
                and preconditions.get("resourceVersion") in (None, meta.get("resourceVersion")) and info.namespaced):
            gc.prepare_delete(self.store, current, target.namespace, policy)  # a failing precondition is 409 below
        if info.key == "namespaces":
            # The namespace controller would delete the contents while the namespace is Terminating.
            for contained in discovery.RESOURCES:
                if contained.namespaced:
                    for key, _ in list(self.store.iter(contained.key, target.name)):
                        self.store.delete(contained.key, key[0], key[1])
        deleted = self.store.delete(info.key, target.namespace, target.name or "",
                                    expect_uid=preconditions.get("uid"), expect_rv=preconditions.get("resourceVersion"))
        del current
        return _json_response(deleted)

    def _delete_collection(self, target: Target, query: dict[str, str]) -> web.Response:
        info = target.info
        dry_run = _dry_run(query)
        predicate = selectors.make_predicate(query.get("labelSelector"), query.get("fieldSelector"), info.key)
        deleted: list[bytes] = []
        for key, stored in list(self.store.iter(info.key, target.namespace)):
            if predicate is not None and not predicate(stored.obj):
                continue
            if info.key == "namespaces" and key[1] in IMMORTAL_NAMESPACES:
                continue
            if info.key == "pods":
                last, _ = deletion.delete_pod(self.store, key[0], key[1], {}, query, dry_run)
            else:
                last = stored.obj if dry_run else self.store.delete(info.key, key[0], key[1])
            deleted.append(dumps(last))
        head = dumps({"kind": info.list_kind, "apiVersion": info.api_version,
                      "metadata": {"resourceVersion": str(self.store.resource_version)}})
        return _json_response(None, raw=head[:-1] + b',"items":[' + b",".join(deleted) + b"]}")




def _uuid() -> str:
    import uuid

    return str(uuid.uuid4())


def set_condition(obj: dict[str, Any], condition: dict[str, Any], now: str) -> None:
    """podutil.UpdatePodCondition: replace the condition of that type, stamping transition time
    (`now`, on the API server's clock) on change."""
    status = obj.setdefault("status", {})
    conditions = status.setdefault("conditions", [])
    for index, existing in enumerate(conditions):
        if existing.get("type") == condition["type"]:
            merged = dict(existing)
            merged.update(condition)
            if existing.get("status") != condition.get("status"):
                merged["lastTransitionTime"] = now
            if "reason" not in condition:
                merged.pop("reason", None)
            if "message" not in condition:
                merged.pop("message", None)
            conditions[index] = merged
            return
    conditions.append(dict(condition, lastProbeTime=None, lastTransitionTime=now))
