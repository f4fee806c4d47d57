"""Generate ganggate/sim/apiserver/openapi_schemas_resource.py: the resource.k8s.io/v1 (DRA) schemas.

    .venv/bin/python -m ganggate.sim.apiserver.openapi_resource_gen

kubesim's other schemas are Kubernetes 1.31's (openapi_gen.py); resource.k8s.io/v1 is GA only
since 1.34, so its kinds come from the `kubernetes-validate` package's v1.35.0 definitions, in the
same conversion, with the PodStatus field DRAExtendedResource adds (extendedResourceClaimStatus).
Needs the `test` extra (kubernetes-validate) at generation time only.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from ganggate.sim.apiserver.openapi_gen import convert, reachable, render

K8S_VERSION = "1.35.0"
ROOTS = tuple(f"io.k8s.api.resource.v1.{kind}" for kind in (
    "DeviceClass", "DeviceClassList", "ResourceSlice", "ResourceSliceList", "ResourceClaim", "ResourceClaimList",
    "ResourceClaimTemplate", "ResourceClaimTemplateList")) + ("io.k8s.api.core.v1.PodExtendedResourceClaimStatus",)
_OWN = ("io.k8s.api.resource.", "io.k8s.api.core.v1.PodExtendedResourceClaimStatus",
        "io.k8s.api.core.v1.ContainerExtendedResourceRequest")


def generate(definitions: dict[str, Any]) -> dict[str, Any]:
    """The DRA schemas (the meta and core ones they reference are kubesim's 1.31 ones)."""
    return {name: convert(definitions[name]) for name in reachable(definitions, list(ROOTS)) if name.startswith(_OWN)}


def main() -> int:
    import kubernetes_validate

    source = (Path(os.path.dirname(kubernetes_validate.__file__)) / "kubernetes-json-schema"
              / f"v{K8S_VERSION}-local" / "_definitions.json")
    definitions = json.loads(source.read_text())["$defs"]
    text = render(generate(definitions)).replace("ganggate.sim.apiserver.openapi_gen", "ganggate.sim.apiserver.openapi_resource_gen")
    text = text.replace("1.31.0", K8S_VERSION).replace("the\nkinds kubesim serves", "the\nresource.k8s.io/v1 kinds")
    target = Path(__file__).with_name("openapi_schemas_resource.py")
    target.write_text(text)
    print(f"wrote {target}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
