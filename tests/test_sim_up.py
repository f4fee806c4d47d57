"""`ganggate sim up`: a local cluster (kubesim, webhook, controller) in one command, used with kubectl."""

from __future__ import annotations

from pathlib import Path

from ganggate.local.parts import manifest_text

ROOT = Path(__file__).resolve().parents[1]


def test_shipped_webhook_configuration_is_deploys_kubesim_manifest() -> None:
    """The package's copy (in an installed wheel) is byte for byte deploy/kubesim/webhook-url.yaml."""
    assert manifest_text() == (ROOT / "deploy" / "kubesim" / "webhook-url.yaml").read_text(encoding="utf-8")
