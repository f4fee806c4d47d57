"""kubesim's admission chain, as k8s.io/apiserver/pkg/admission keeps it: mutating webhooks
(plugin/webhook/mutating), their matching rules and CEL matchConditions (plugin/webhook/matchconditions),
and the Priority plugin (plugin/pkg/admission/priority).
"""
