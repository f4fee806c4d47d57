"""kubesim's admission chain, as k8s.io/apiserver/pkg/admission keeps it: mutating webhooks
(plugin/webhook/mutating), their matching rules and CEL matchConditions (plugin/webhook/matchconditions),
the Priority plugin (plugin/pkg/admission/priority), MutatingAdmissionPolicy (plugin/policy/mutating:
mutating_policy, cel_mutation) run before the webhooks, and validating admission by
ValidatingAdmissionPolicy (plugin/policy/validating) with the CEL both use, compiled once per
expression (cel_fast, cel_library; k8s.io/apiserver/pkg/admission/plugin/cel).
"""
