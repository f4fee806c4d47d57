"""Per-kind create/update strategies for the kinds whose rules live outside ganggate.sim.apiserver.validation.

The API server asks `for_key(resource key)`; None means the kind's rules are in validation.py.
Each Strategy bundles what a registry's RESTCreateStrategy/RESTUpdateStrategy does
(k8s.io/apiserver/pkg/registry/rest/create.go, update.go): defaulting, PrepareForCreate,
PrepareForUpdate (main resource and status), Validate, ValidateUpdate.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ganggate.sim.api import resource as dra_api
from ganggate.sim.api import scheduling
from ganggate.sim.apimachinery.errors import Cause
from ganggate.sim.apiserver.admission import priority
from ganggate.sim.apiserver.registry import job as job_strategy
from ganggate.sim.apiserver.registry import mutatingadmissionpolicy as map_
from ganggate.sim.apiserver.registry import poddisruptionbudget as disruption
from ganggate.sim.apiserver.registry import provisioningrequest as provreq
from ganggate.sim.apiserver.registry import resource as dra
from ganggate.sim.apiserver.registry import service as services
from ganggate.sim.apiserver.registry import validatingadmissionpolicy as vap
from ganggate.sim.apiserver.registry import workload

Obj = dict[str, Any]


@dataclass(frozen=True)
class Strategy:
    """The strategy functions of one kind."""

    default: Callable[[Obj], None]
    prepare_create: Callable[[Obj], None]
    prepare_update: Callable[[Obj, Mapping[str, Any]], None]
    prepare_status_update: Callable[[Obj, Mapping[str, Any]], None]
    validate: Callable[[Mapping[str, Any]], list[Cause]]
    validate_update: Callable[[Mapping[str, Any], Mapping[str, Any]], list[Cause]]
    default_delete_policy: str = "Background"


_STRATEGIES: dict[str, Strategy] = {
    "services": Strategy(services.default_service, services.prepare_create, services.prepare_update,
                         services.prepare_status_update, services.validate, services.validate_update),
    "jobs.batch": Strategy(job_strategy.default_job, job_strategy.prepare_create, job_strategy.prepare_update,
                           job_strategy.prepare_status_update, job_strategy.validate, job_strategy.validate_update,
                           job_strategy.DEFAULT_DELETE_POLICY),
    priority.KEY: Strategy(priority.default_priority_class, priority.prepare_create, priority.prepare_update,
                           priority.prepare_update, priority.validate, priority.validate_update),
    disruption.KEY: Strategy(disruption.default_pdb, disruption.prepare_create, disruption.prepare_update,
                             disruption.prepare_status_update, disruption.validate, disruption.validate_update),
    vap.POLICY_KEY: Strategy(vap.default_policy, vap.prepare_create, vap.prepare_update, vap.prepare_status_update,
                             vap.validate_policy, vap.validate_policy_update),
    vap.BINDING_KEY: Strategy(vap.default_binding, vap.prepare_create, vap.prepare_update, vap.prepare_status_update,
                              vap.validate_binding, vap.validate_binding_update),
    map_.POLICY_KEY: Strategy(map_.default_policy, map_.prepare_create, map_.prepare_update,
                              map_.prepare_status_update, map_.validate_policy, map_.validate_policy_update),
    map_.BINDING_KEY: Strategy(map_.default_binding, map_.prepare_create, map_.prepare_update,
                               map_.prepare_status_update, map_.validate_binding, map_.validate_binding_update),
    provreq.KEY: Strategy(provreq.default, provreq.prepare_create, provreq.prepare_update,
                          provreq.prepare_status_update, provreq.validate, provreq.validate_update),
    provreq.PODTEMPLATES: Strategy(provreq.default, provreq.prepare_template_create, provreq.prepare_template_update,
                                   provreq.prepare_template_update, provreq.validate_template,
                                   provreq.validate_template_update),
    scheduling.WORKLOADS: Strategy(workload.default, workload.prepare_create, workload.prepare_update,
                                   workload.prepare_status_update, workload.validate_workload,
                                   workload.validate_workload_update),
    scheduling.PODGROUPS: Strategy(workload.default, workload.prepare_create, workload.prepare_update,
                                   workload.prepare_status_update, workload.validate_podgroup,
                                   workload.validate_podgroup_any_update),
    dra_api.DEVICE_CLASSES: Strategy(dra.default_class, dra.prepare_no_status, dra.prepare_update_no_status,
                                     dra.prepare_update_no_status, dra.validate_class, dra.validate_class_update),
    dra_api.RESOURCE_SLICES: Strategy(lambda obj: None, dra.prepare_no_status, dra.prepare_update_no_status,
                                      dra.prepare_update_no_status, dra.validate_slice, dra.validate_slice_update),
    dra_api.RESOURCE_CLAIMS: Strategy(dra.default_claim, dra.prepare_claim_create, dra.prepare_claim_update,
                                      dra.prepare_claim_status_update, dra.validate_claim, dra.validate_claim_update),
    dra_api.RESOURCE_CLAIM_TEMPLATES: Strategy(dra.default_template, dra.prepare_no_status, dra.prepare_update_no_status,
                                               dra.prepare_update_no_status, dra.validate_template,
                                               dra.validate_template_update),
}


def for_key(key: str) -> Strategy | None:
    """The strategy of a resource key (`services`, `jobs.batch`), or None."""
    return _STRATEGIES.get(key)
