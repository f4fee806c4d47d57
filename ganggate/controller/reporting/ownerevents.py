"""The gang's Events on its owner: where operators look first (`kubectl describe job`).

A gang's pods are usually made by a controller (a Job, a JobSet's Jobs, a PyTorchJob...): its
waiting, released, broken, restarting, cannot-fit and drain Events also go to each distinct
owning controller of its pods (their ownerReference with controller: true), one per change: a
(reason, kind) the owner has already been told for that gang is not told again, so a wait whose
counts move ("room for 2", "room for 3") writes no new owner Event. Pods keep their own Events
(controller.reporting.events, controller.reporting.waitreport). Bare pods have no owner: nothing is sent here.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from ganggate.controller.reporting.events import PodRef

_REMEMBER = 100_000  # gangs whose last owner Event is remembered (oldest forgotten first)
_MAX_OWNERS = 8  # a gang over more owners (a JobSet of many Jobs) tells the first 8, by name


def owner_refs(namespace: str, pods: Iterable[Any]) -> list[PodRef]:
    """The distinct owning controllers of the pods, by kind and name (at most _MAX_OWNERS)."""
    refs: dict[str, PodRef] = {}
    for pod in pods:
        ref = pod.controller_ref
        if not ref or not ref.get("uid") or ref["uid"] in refs:
            continue
        refs[ref["uid"]] = PodRef(namespace, str(ref.get("name") or ""), str(ref["uid"]),
                                  kind=str(ref.get("kind") or ""), api_version=str(ref.get("apiVersion") or ""))
    return sorted(refs.values(), key=lambda r: (r.kind, r.name))[:_MAX_OWNERS]


class OwnerEvents:
    """Sends a gang's Event to its owners once per change (see the module docstring)."""

    def __init__(self, recorder: Any) -> None:
        self.recorder = recorder
        self._last: OrderedDict[tuple[str, str], tuple[str, str, tuple[str, ...]]] = OrderedDict()

    def tell(self, gang_key: tuple[str, str], pods: Iterable[Any], reason: str, message: str,
             kind: str = "") -> bool:
        """Emit (reason, message) on the owners of `pods` unless they heard this reason and
        kind (default: the message) last for this gang; True when sent."""
        refs = owner_refs(gang_key[0], pods)
        if not refs:
            return False
        said = (reason, kind or message, tuple(r.uid for r in refs))  # a new owner (a Job made again) hears it
        if self._last.get(gang_key) == said:
            return False
        self._last[gang_key] = said
        self._last.move_to_end(gang_key)
        while len(self._last) > _REMEMBER:
            self._last.popitem(last=False)
        for ref in refs:
            self.recorder.emit(ref, reason, message, log_it=False)
        return True

    def forget(self, gang_key: tuple[str, str]) -> None:
        """The gang is gone: tell its next owner anew."""
        self._last.pop(gang_key, None)
