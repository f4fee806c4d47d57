"""kubesim's mutating admission chain: MutatingWebhookConfigurations applied as kube-apiserver does.

The API server calls `AdmissionChain.admit` on CREATE and UPDATE (incl. PATCH) of an object, after
decoding and defaulting and before validation. The chain follows
k8s.io/apiserver/pkg/admission/plugin/webhook/mutating/dispatcher.go (Dispatch,
callAttrMutatingHook), generic/webhook.go (ShouldCallHook) and
k8s.io/apiserver/pkg/admission/reinvocation.go (one reinvocation round for
`reinvocationPolicy: IfNeeded`). Matching is in kubesim/apiserver/admission/matching.py, CEL
matchConditions in kubesim/apiserver/admission/cel.py, the HTTPS call in kubesim/apiserver/admission/webhook.py.

Known differences: kubesim calls only `clientConfig.url` webhooks (a `service` reference is a
call error, failurePolicy applies); matchConditions get no `authorizer`; "changed" (which
triggers reinvocation) ignores nulls and empty lists/maps as Semantic.DeepEqual does, but not its
Quantity equality; webhook warnings and audit annotations are dropped.

Why this module is long: the mutating policies and the webhooks share one reinvocation round
(reinvocation.go), whose order is easiest to check against the source in one place.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp

from ganggate.sim.apiserver.admission import webhook as call
from ganggate.sim.apiserver.admission.cel import build_activation, evaluate_conditions
from ganggate.sim.apiserver.admission.matching import (
    SelectorError,
    Webhook,
    any_rule_matches,
    namespace_matches,
    namespace_selector_applies,
    namespace_selector_is_empty,
    object_matches,
    request_kind,
    rule_matches,
    same_objects,
    webhooks_in_order,
)
from ganggate.sim.apiserver.watch import clone

log = logging.getLogger("ganggate.sim.apiserver.admission.chain")


class AdmissionDenied(Exception):
    """The admission chain refuses the request; the API server answers with `status()`.

    code, reason and message are those of the metav1.Status the real server would send;
    details holds its optional `details` (name, group, kind).
    """

    def __init__(self, code: int, reason: str, message: str, **details: Any) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = {k: v for k, v in details.items() if v is not None}

    def status(self) -> dict[str, Any]:
        """The Status object for the response body."""
        body: dict[str, Any] = {
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": self.message, "reason": self.reason, "code": self.code,
        }
        if self.details:
            body["details"] = dict(self.details)
        return body


def _internal_error(detail: str) -> AdmissionDenied:
    """apierrors.NewInternalError: 500, InternalError, "Internal error occurred: <err>"."""
    return AdmissionDenied(500, "InternalError", f"Internal error occurred: {detail}", causes=[{"message": detail}])


def _rejection(webhook_name: str, status: Mapping[str, Any] | None) -> AdmissionDenied:
    """A webhook's `allowed: false`, as webhook/errors/statuserror.go ToStatusErr builds it.

    The webhook's status.code is kept when it is >= 400, otherwise it becomes 400; the reason
    is the webhook's own (possibly empty).
    """
    status = status or {}
    denied_by = f'admission webhook "{webhook_name}" denied the request'
    if status.get("message"):
        message = f"{denied_by}: {status['message']}"
    elif status.get("reason"):
        message = f"{denied_by}: {status['reason']}"
    else:
        message = f"{denied_by} without explanation"
    code = status.get("code")
    code = code if isinstance(code, int) and code >= 400 else 400
    given = status.get("details")
    details: dict[str, Any] = given if isinstance(given, dict) else {}
    return AdmissionDenied(code, str(status.get("reason") or ""), message, **details)


def _empty(value: Any) -> bool:
    """Whether a field's value counts as unset: null, an empty list, or a map of nothing but such."""
    if value is None:
        return True
    if isinstance(value, dict):
        return all(_empty(item) for item in value.values())
    if isinstance(value, list):
        return not value
    return False


def semantically_equal(a: Any, b: Any) -> bool:
    """Equality as apimachinery's Semantic.DeepEqual sees decoded objects: a null field is an unset
    one, and an empty slice or map equals a nil one (third_party/forked/golang/reflect/deep_equal.go).
    Not modelled: its registered equalities (a Quantity "1" equals "1000m").

    Walks only where the two differ: equal values (Python's ==) are equal here too."""
    if a == b:
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        for key in a.keys() | b.keys():
            mine, theirs = a.get(key), b.get(key)
            if _empty(mine) or _empty(theirs):
                if not (_empty(mine) and _empty(theirs)):
                    return False
            elif not semantically_equal(mine, theirs):
                return False
        return True
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(semantically_equal(x, y) for x, y in zip(a, b, strict=True))
    return False


@dataclass
class _ReinvokeContext:
    """webhookReinvokeContext (mutating/reinvocationcontext.go) plus the chain's should-reinvoke flag."""

    previously_invoked: set[str] = field(default_factory=set)
    reinvoke: set[str] = field(default_factory=set)
    should_reinvoke: bool = False

    def require_reinvoking_previously_invoked(self) -> None:
        self.reinvoke |= self.previously_invoked
        self.previously_invoked = set()


class _Kinded(Protocol):
    """What _default reads of a request: this chain's own or a mutating policy's (admission.policy.Request)."""

    @property
    def kind(self) -> Mapping[str, str]: ...


@dataclass(frozen=True)
class _Request:
    operation: str
    kind: Mapping[str, str]
    resource: Mapping[str, str]
    sub_resource: str | None
    namespace: str
    name: str
    old_obj: dict[str, Any] | None
    dry_run: bool
    user_info: Mapping[str, Any]


class AdmissionChain:
    """Runs the stored MutatingWebhookConfigurations over one request at a time."""

    def __init__(
        self,
        list_configurations: Callable[[], list[dict]],
        get_namespace: Callable[[str], dict | None],
        policies: Any = None,
    ) -> None:
        self._list_configurations = list_configurations
        self._get_namespace = get_namespace
        # MutatingAdmissionPolicies (apiserver/admission/mutating_policy.py), run before the webhooks
        # and in the same reinvocation round; None when the feature gate is off.
        self._policies = policies
        self._session: aiohttp.ClientSession | None = None
        self._session_loop: asyncio.AbstractEventLoop | None = None
        # The webhooks in order, made once per change of the stored configurations (which are never
        # mutated in place), as mutating_webhook_manager.go rebuilds its accessors only when the
        # configuration informer changes: (the configurations they were made from, the webhooks).
        self._ordered: tuple[list[dict], list[Webhook]] | None = None
        self._named: dict[tuple[str, str, str, str, str | None, bool], bool] = {}  # _rules_name's answers

    async def close(self) -> None:
        """Close the pooled HTTPS connections to webhooks (safe to call more than once)."""
        if self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None

    def _http(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._session_loop is not loop:
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64))
            self._session_loop = loop
        return self._session

    async def admit(
        self,
        *,
        operation: str,
        kind: dict,
        resource: dict,
        sub_resource: str | None,
        namespace: str,
        name: str,
        obj: dict,
        old_obj: dict | None,
        dry_run: bool,
        user_info: dict,
    ) -> dict:
        """Return the object after every matching webhook's patch; raise AdmissionDenied to refuse.

        `obj` is never changed: a webhook's patch applies to a copy (webhook.apply_patch), and `obj`
        itself is returned when nothing patched it."""
        configurations = self._list_configurations()
        policies = self._policies if self._policies is not None and self._policies.active() else None
        if policies is not None and not policies.may_match(operation, resource, sub_resource or None, namespace or ""):
            policies = None  # no policy's rules name this request: none can apply (PolicyChain.may_match)
        hooks = self._webhooks(configurations)
        if policies is None and not self._rules_name(hooks, operation, resource, sub_resource or None, namespace or ""):
            return obj  # no policy, and no webhook's rules name this request (a lease, an event, ...): nothing to call or copy
        request = _Request(
            operation, dict(kind), dict(resource), sub_resource or None, namespace or "", name or "",
            clone(old_obj), bool(dry_run), dict(user_info or {}),
        )
        current = obj
        reinvoke = _ReinvokeContext()
        if policies is not None:
            # The policies' own patching starts from this copy (watch.clone: as deepcopy, faster).
            current = clone(obj)
            from ganggate.sim.apiserver.admission.mutating_policy import ReinvocationContext

            policy_context = ReinvocationContext()
            policy_request = self._policy_request(request, current)
            current = policies.admit(policy_request, current, policy_context, reinvoking=False)
            current = await self._dispatch(hooks, request, current, reinvoke, round_=0)
            if not (policy_context.should_reinvoke or reinvoke.should_reinvoke):
                return current
            # reinvocation.go: the whole chain once more. The policies see whether the webhooks changed
            # the object since they ran, the webhooks whether the policies did since the last webhook
            # call (dispatcher.go IsOutputChangedSince...): then the IfNeeded ones run again.
            last_webhook_output = clone(current)
            current = policies.admit(policy_request, current, policy_context, reinvoking=True)
            if not semantically_equal(current, last_webhook_output):
                reinvoke.require_reinvoking_previously_invoked()
            return await self._dispatch(hooks, request, current, reinvoke, round_=1)
        current = await self._dispatch(hooks, request, current, reinvoke, round_=0)
        if reinvoke.should_reinvoke and reinvoke.reinvoke:
            # reinvocation.go calls the chain a second time. kubesim has no in-tree mutating
            # plugins, so the "output changed since last webhook invocation" check cannot fire.
            # With no webhook marked for reinvocation that round can call nothing (only a call can
            # mark one), so it is skipped; the real one would re-evaluate every webhook's match
            # (a CEL error there would still fail the request).
            current = await self._dispatch(hooks, request, current, reinvoke, round_=1)
        return current

    def _webhooks(self, configurations: list[dict]) -> list[Webhook]:
        """webhooks_in_order of these configurations, made again only when one of them changed."""
        made = self._ordered
        if made is not None and same_objects(made[0], configurations):
            return made[1]
        hooks = webhooks_in_order(configurations)
        self._ordered = (configurations, hooks)
        self._named = {}
        return hooks

    def _rules_name(self, hooks: list[Webhook], operation: str, resource: Mapping[str, str], sub_resource: str | None,
                    namespace: str) -> bool:
        """Whether some webhook's rules match the request, remembered per kind of request while the
        webhooks stay the same (rules.go Matcher.Matches reads of the request only these)."""
        key = request_kind(operation, resource, sub_resource, namespace)
        named = self._named.get(key)
        if named is None:
            named = self._named[key] = any(
                rule_matches(rule, operation=operation, resource=resource, sub_resource=sub_resource, namespace=namespace)
                for hook in hooks for rule in hook.spec.get("rules") or [])
        return named

    @staticmethod
    def _policy_request(request: _Request, current: dict) -> Any:
        from ganggate.sim.apiserver.admission.policy import Request

        return Request(request.operation, request.kind, request.resource, request.sub_resource, request.namespace,
                       request.name, current, request.old_obj, request.dry_run, request.user_info)

    async def _dispatch(
        self, hooks: list[Webhook], request: _Request, current: dict, reinvoke: _ReinvokeContext, round_: int
    ) -> dict:
        for hook in hooks:
            if not self._should_call(hook, request, current):
                continue
            # A webhook is never called for the first time in the reinvocation round.
            if round_ == 1 and hook.uid not in reinvoke.reinvoke:
                continue
            changed = False
            error: Exception | None = None
            try:
                patched = await self._call(hook, request, current)
            except (call.CallError, AdmissionDenied) as exc:
                error = exc
            else:
                if patched is not None:
                    # Compared before defaulting, as the dispatcher does.
                    changed = not semantically_equal(patched, current)
                    self._default(request, patched)
                    current = patched
            if changed:
                reinvoke.require_reinvoking_previously_invoked()
                reinvoke.should_reinvoke = True
            if hook.reinvoke_if_needed:
                reinvoke.previously_invoked.add(hook.uid)
            if error is None:
                continue
            if isinstance(error, call.CallError):
                if hook.ignore_failures:
                    log.warning("Failed calling webhook, failing open %s: %s", hook.name, error)
                    continue
                log.warning("Failed calling webhook, failing closed %s: %s", hook.name, error)
                raise _internal_error(str(error))
            raise error
        return current

    def _should_call(self, hook: Webhook, request: _Request, current: dict) -> bool:
        """ShouldCallHook: selectors, rules, then matchConditions; raises AdmissionDenied on errors.

        As in generic/webhook.go, a selector that cannot be evaluated (a missing namespace, a
        broken selector) is reported only if the webhook's rules match the request.
        """
        ns_matches, ns_error = self._match_namespace(hook, request, current)
        if not ns_matches and ns_error is None:
            return False
        obj_error: AdmissionDenied | None = None
        try:
            if not object_matches(hook, current, request.old_obj):
                return False
        except SelectorError as exc:
            obj_error = _internal_error(str(exc))
        if not any_rule_matches(
            hook, operation=request.operation, resource=request.resource,
            sub_resource=request.sub_resource, namespace=request.namespace,
        ):
            return False
        if ns_error is not None:
            raise ns_error
        if obj_error is not None:
            raise obj_error
        conditions = hook.spec.get("matchConditions") or []
        if not conditions:
            return True
        review_request: dict[str, Any] | None = None  # null when no condition names it: none can read it
        if hook.conditions_read_request:
            review_request = call.admission_request(
                uid="", operation=request.operation, kind=request.kind, resource=request.resource,
                sub_resource=request.sub_resource, namespace=request.namespace, name=request.name,
                obj=None, old_obj=None, dry_run=request.dry_run, user_info=request.user_info,
            )
            for dropped in ("uid", "object", "oldObject"):
                review_request.pop(dropped)
        result = evaluate_conditions(conditions, build_activation(current, request.old_obj, review_request))
        if result.error is not None:
            if hook.ignore_failures:
                return False
            # generic/webhook.go: a matchConditions error under Fail is a Forbidden.
            log.warning("Failed evaluating match conditions, failing closed %s: %s", hook.name, result.error)
            resource = request.resource.get("resource", "")
            group = request.resource.get("group", "")
            qualified = f"{resource}.{group}" if group else resource
            target = f'{qualified} "{request.name}"' if request.name else qualified
            raise AdmissionDenied(
                403, "Forbidden", f"{target} is forbidden: {result.error}", name=request.name, group=group, kind=resource
            )
        return result.matches

    def _match_namespace(self, hook: Webhook, request: _Request, current: dict) -> tuple[bool, AdmissionDenied | None]:
        """namespace/matcher.go MatchNamespaceSelector: (matches, error)."""
        if not namespace_selector_applies(request.resource, request.namespace):
            return True, None
        try:
            if namespace_selector_is_empty(hook):
                return True, None
            labels = self._namespace_labels(request, current)
            return namespace_matches(hook, labels), None
        except SelectorError as exc:
            return False, _internal_error(str(exc))
        except AdmissionDenied as exc:
            return False, exc

    def _namespace_labels(self, request: _Request, current: dict) -> Mapping[str, str]:
        """The namespace's labels (namespace/matcher.go GetNamespaceLabels); 404 when it is missing."""
        if (
            request.resource.get("resource") == "namespaces"
            and not request.sub_resource
            and request.operation in ("CREATE", "UPDATE")
        ):
            return (current.get("metadata") or {}).get("labels") or {}
        namespace = self._get_namespace(request.namespace)
        if namespace is None:
            raise AdmissionDenied(
                404, "NotFound", f'namespaces "{request.namespace}" not found', name=request.namespace, kind="namespaces"
            )
        return (namespace.get("metadata") or {}).get("labels") or {}

    async def _call(self, hook: Webhook, request: _Request, current: dict) -> dict | None:
        """callAttrMutatingHook: the patched object, None for no change; CallError/AdmissionDenied on failure."""
        if request.dry_run:
            # A webhook that may have side effects is never called on a dry run: the whole request
            # fails with webhook/errors NewDryRunUnsupportedErr (400), whatever the failurePolicy.
            if hook.side_effects is None:
                raise call.CallError(hook.name, "Webhook SideEffects is nil")
            if hook.side_effects not in ("None", "NoneOnDryRun"):
                raise AdmissionDenied(400, "BadRequest", f'admission webhook "{hook.name}" does not support dry run')
        version = call.review_version(hook.spec)
        if version is None:
            raise call.CallError(
                hook.name,
                "could not create admission objects: webhook does not accept known AdmissionReview versions (v1, v1beta1)",
            )
        client_config = hook.spec.get("clientConfig") or {}
        try:
            url = call.request_url(client_config, hook.timeout_seconds)
            context = call.ssl_context(str(client_config.get("caBundle") or ""))
        except ValueError as exc:
            raise call.CallError(hook.name, f"could not get REST client: {exc}") from None
        uid = call.new_uid()
        review = call.review_body(
            version,
            call.admission_request(
                uid=uid, operation=request.operation, kind=request.kind, resource=request.resource,
                sub_resource=request.sub_resource, namespace=request.namespace, name=request.name,
                obj=current, old_obj=request.old_obj, dry_run=request.dry_run, user_info=request.user_info,
            ),
        )
        raw = await call.post_review(self._http(), hook.name, url, context, review, hook.timeout_seconds)
        response = call.verify_response(hook.name, uid, version, raw)
        if not response.allowed:
            raise _rejection(hook.name, response.result)
        try:
            return call.apply_patch(hook.name, response, current)
        except call.PatchApplyError as exc:
            raise _internal_error(str(exc)) from None

    @staticmethod
    def _default(request: _Kinded, patched: dict) -> None:
        """Default the patched object before the next webhook sees it (callAttrMutatingHook calls
        o.GetObjectDefaulter().Default after decoding the patched JSON). Pods only: kubesim's
        defaulting lives in kubesim/apiserver/validation.py. A patched object that is not a decodable pod
        is an internal error there, as here."""
        if (request.kind.get("group"), request.kind.get("version"), request.kind.get("kind")) != ("", "v1", "Pod"):
            return
        from ganggate.sim.apiserver.validation import default_pod

        try:
            default_pod(patched)
        except (AttributeError, TypeError, ValueError) as exc:
            raise _internal_error(f"decoding the patched object: {exc}") from None

