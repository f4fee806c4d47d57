"""Generate ganggate/sim/apiserver/openapi_schemas.py: the OpenAPI v3 component schemas kubesim serves.

    .venv/bin/python -m ganggate.sim.apiserver.openapi_gen        # rewrites ganggate/sim/apiserver/openapi_schemas.py

Source: the `kubernetes-validate` package (https://github.com/willthames/kubernetes-validate,
Apache-2.0), whose `kubernetes-json-schema/v<K8S_VERSION>-local/_definitions.json` is the
Kubernetes OpenAPI v2 definitions (api/openapi-spec/swagger.json of that release) converted to
JSON Schema. This turns them back into OpenAPI v3 component schemas in the shape kube-apiserver
serves at /openapi/v3 (k8s.io/kube-openapi/pkg/builder3): `$ref`s to `#/components/schemas/`,
wrapped in `allOf` when they carry a description; nullable type lists reduced to the type;
IntOrString and Quantity as the builder renders them; the `enum`s openapi2jsonschema adds to
apiVersion/kind dropped. Only the definitions reachable from the kinds kubesim serves are kept.
Needs the `test` extra (kubernetes-validate) at generation time only.
"""

from __future__ import annotations

import base64
import json
import os
import sys
import zlib
from pathlib import Path
from typing import Any

K8S_VERSION = "1.31.0"  # kubesim's /version
ROOTS = (
    "io.k8s.api.core.v1.Pod", "io.k8s.api.core.v1.Node", "io.k8s.api.core.v1.Namespace", "io.k8s.api.core.v1.Event",
    "io.k8s.api.core.v1.Service", "io.k8s.api.batch.v1.Job", "io.k8s.api.coordination.v1.Lease",
    "io.k8s.api.admissionregistration.v1.MutatingWebhookConfiguration", "io.k8s.api.events.v1.Event",
    "io.k8s.api.core.v1.Binding", "io.k8s.api.policy.v1.Eviction",
    "io.k8s.api.scheduling.v1.PriorityClass", "io.k8s.api.policy.v1.PodDisruptionBudget",
    "io.k8s.api.core.v1.PodTemplate",
)
META = ("Status", "DeleteOptions", "Patch", "WatchEvent", "APIResourceList")
_PREFIX = "io.k8s.apimachinery.pkg.apis.meta.v1."
INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"


def _ref(name: str) -> str:
    return f"#/components/schemas/{name}"


def convert(schema: Any) -> Any:
    """One JSON Schema node as an OpenAPI v3 schema node."""
    if isinstance(schema, list):
        return [convert(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "$ref":
            continue
        if key == "type" and isinstance(value, list):
            kinds = [t for t in value if t != "null"]
            out["type"] = kinds[0] if len(kinds) == 1 else kinds
        elif key == "properties":
            out[key] = {name: convert(prop) for name, prop in value.items()}
            for name in ("apiVersion", "kind"):
                if isinstance(out[key].get(name), dict):
                    out[key][name].pop("enum", None)
        else:
            out[key] = convert(value)
    if "$ref" in schema:
        target = _ref(schema["$ref"].rsplit("/", 1)[-1])
        if len(out) == 0:
            return {"$ref": target}
        out["allOf"] = [{"$ref": target}]
    return out


def reachable(definitions: dict[str, Any], roots: list[str]) -> list[str]:
    """The names reachable through $ref from the roots."""
    seen: set[str] = set()
    stack = [r for r in roots if r in definitions]

    def refs(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "$ref" and isinstance(value, str):
                    stack.append(value.rsplit("/", 1)[-1])
                else:
                    refs(value)
        elif isinstance(node, list):
            for item in node:
                refs(item)

    while stack:
        name = stack.pop()
        if name not in seen and name in definitions:
            seen.add(name)
            refs(definitions[name])
    return sorted(seen)


def generate(definitions: dict[str, Any]) -> dict[str, Any]:
    """The component schemas, keyed by definition name."""
    roots = list(ROOTS) + [r + "List" for r in ROOTS] + [_PREFIX + m for m in META]
    out = {name: convert(definitions[name]) for name in reachable(definitions, roots)}
    out[INT_OR_STRING] = {"description": definitions[INT_OR_STRING].get("description", ""),
                          "type": "string", "format": "int-or-string"}
    out[QUANTITY] = {"description": definitions[QUANTITY].get("description", ""), "type": "string"}
    return out


def source_path() -> Path:
    import kubernetes_validate

    return Path(os.path.dirname(kubernetes_validate.__file__)) / "kubernetes-json-schema" / f"v{K8S_VERSION}-local" / "_definitions.json"


def render(schemas: dict[str, Any]) -> str:
    """The text of openapi_schemas.py: the schemas as compressed JSON, base64, in 100-character lines."""
    blob = base64.b64encode(zlib.compress(json.dumps(schemas, sort_keys=True, separators=(",", ":")).encode(), 9)).decode()
    lines = [blob[i:i + 100] for i in range(0, len(blob), 100)]
    body = "\n".join(f'    "{line}"' for line in lines)
    return (
        '"""GENERATED by `python -m ganggate.sim.apiserver.openapi_gen`; do not edit.\n\n'
        f"Why this module is long: it is data, the OpenAPI v3 component schemas of Kubernetes {K8S_VERSION} for the\n"
        "kinds kubesim serves (zlib-compressed JSON, base64), generated from the `kubernetes-validate` package's\n"
        f"kubernetes-json-schema/v{K8S_VERSION}-local/_definitions.json (Apache-2.0), itself converted from\n"
        "kubernetes/kubernetes api/openapi-spec/swagger.json. See ganggate/sim/apiserver/openapi_gen.py.\n"
        '"""\n\n'
        "import base64\nimport json\nimport zlib\nfrom typing import Any\n\n"
        f'K8S_VERSION = "{K8S_VERSION}"\n'
        f"_BLOB = (\n{body}\n)\n\n\n"
        "def load() -> dict[str, Any]:\n"
        '    """The component schemas, keyed by definition name."""\n'
        "    return json.loads(zlib.decompress(base64.b64decode(_BLOB)))\n"
    )


def main() -> int:
    definitions = json.loads(source_path().read_text())["$defs"]
    target = Path(__file__).with_name("openapi_schemas.py")
    target.write_text(render(generate(definitions)))
    print(f"wrote {target}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
