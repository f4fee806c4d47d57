"""A kubeconfig for the simulator that kubectl and kubernetes-asyncio accept.

One cluster with `server: http://127.0.0.1:PORT` (plain HTTP: no certificate to trust), one
user with a dummy bearer token (the simulator does not authenticate), one context, selected as
current-context (clientcmd/api/v1 Config).
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

CONTEXT = "kubesim"


def kubeconfig_dict(server: str, name: str = CONTEXT, namespace: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": [{"name": name, "cluster": {"server": server}}],
        "users": [{"name": name, "user": {"token": "kubesim-dummy-token"}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name, "namespace": namespace}}],
        "current-context": name,
    }


def write_kubeconfig(path: str | os.PathLike[str], server: str, name: str = CONTEXT) -> Path:
    """Write the kubeconfig (mode 0600, as kubectl writes its own) and return its path.

    Written to a temporary file beside it and renamed into place, so a reader polling for the
    file (kubectl, a test waiting for `sim serve`) never sees it half written."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(kubeconfig_dict(server, name), sort_keys=False)
    partial = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.replace(partial, target)
    return target


def kubesim_server(path: str | os.PathLike[str]) -> str | None:
    """The server URL of a kubeconfig kubesim wrote (its current-context is CONTEXT), else None."""
    try:
        config = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        if config.get("current-context") != CONTEXT:
            return None
        return str(config["clusters"][0]["cluster"]["server"])
    except (OSError, UnicodeDecodeError, yaml.YAMLError, AttributeError, LookupError, TypeError):
        return None


def still_answers(server: str, timeout: float = 1.0) -> bool:
    """Whether an API server answers at the URL now (any HTTP answer to GET /version counts)."""
    try:
        with urllib.request.urlopen(f"{server.rstrip('/')}/version", timeout=timeout):
            return True
    except urllib.error.HTTPError:
        return True  # it answered, if with an error
    except (OSError, ValueError):
        return False


def in_use(path: str | os.PathLike[str]) -> str | None:
    """Why the kubeconfig at `path` must not be overwritten: a cluster kubesim serves still
    answers at the URL it names (another `sim up` or `sim serve`), whose users would lose it."""
    server = kubesim_server(path) if Path(path).is_file() else None
    if server is None or not still_answers(server):
        return None
    return (f"{path} is the kubeconfig of a cluster that still answers at {server}; stop that one first, or "
            f"write this one's elsewhere: --kubeconfig-out OTHER.kubeconfig (and --port 0 for a free port)")
