"""API client construction: a kubeconfig file, else the in-cluster config, else the default kubeconfig."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

NO_CLUSTER = ("no cluster to talk to: pass --kubeconfig FILE, set KUBECONFIG, or run inside a cluster "
              "(`ganggate sim up --kubeconfig-out FILE` starts a local one)")


class ConfigError(Exception):
    """No usable API configuration (kubeconfig or in-cluster)."""


def _default_kubeconfig_exists() -> bool:
    """Whether kubectl's default would find a file: $KUBECONFIG (a path list) or ~/.kube/config."""
    listed = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    candidates = listed or [str(Path.home() / ".kube" / "config")]
    return any(Path(p).expanduser().is_file() for p in candidates)


# Connections a component keeps open besides its request bursts: the long-running watches
# (nodes, pods, PodDisruptionBudgets), the lease and the Event sender, with room to spare.
STEADY_CONNECTIONS = 16


def pool_size_for(concurrency: int) -> int:
    """Connections an ApiClient needs so that `concurrency` requests in flight never queue
    behind the watches for a free connection (kubernetes-asyncio's default pool is 100)."""
    return max(1, concurrency) + STEADY_CONNECTIONS


async def make_api_client(kubeconfig: str | None, *, concurrency: int | None = None) -> Any:
    """An ApiClient from the kubeconfig, else in-cluster config, else the default kubeconfig;
    with `concurrency`, its connection pool sized for that many requests in flight."""
    from kubernetes_asyncio import client, config

    configuration = client.Configuration()
    if concurrency is not None:
        configuration.connection_pool_maxsize = pool_size_for(concurrency)
    try:
        if kubeconfig:
            await config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        else:
            try:
                config.load_incluster_config(client_configuration=configuration)
            except config.ConfigException:
                if not _default_kubeconfig_exists():
                    raise ConfigError(NO_CLUSTER) from None
                await config.load_kube_config(client_configuration=configuration)
    except (config.ConfigException, OSError) as exc:
        where = kubeconfig or "in-cluster config or the default kubeconfig"
        raise ConfigError(f"cannot configure API access from {where}: {exc}") from exc
    return client.ApiClient(configuration=configuration)
