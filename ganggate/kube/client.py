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


def proxy_once(api_client: Any) -> None:
    """Look the proxy up once per client, not on every request.

    kubernetes-asyncio's session trusts the environment, so before each request aiohttp reads
    ~/.netrc and the proxy variables, each in a worker thread: about 0.35 ms of CPU a request,
    most of what a PATCH costs the client. client-go reads the proxy environment once
    (net/http ProxyFromEnvironment: envProxyFunc's sync.Once) and knows no netrc. So the proxy
    for the API server's URL (HTTPS_PROXY / HTTP_PROXY unless NO_PROXY covers the host) is
    resolved here and passed on every request, a proxy the kubeconfig names still wins, and the
    per-request lookups stop.
    """
    from aiohttp.helpers import get_env_proxy_for_url
    from yarl import URL

    rest = api_client.rest_client
    if not rest.proxy:
        try:
            proxy, auth = get_env_proxy_for_url(URL(api_client.configuration.host))
        except LookupError:
            pass
        else:
            rest.proxy = str(proxy)
            if auth is not None:
                rest.proxy_headers = {**(rest.proxy_headers or {}), "Proxy-Authorization": auth.encode()}
    rest.pool_manager._trust_env = False  # aiohttp's flag (3.x); tests/test_kube_client.py checks it is obeyed


async def make_api_client(kubeconfig: str | None, *, concurrency: int | None = None) -> Any:
    """An ApiClient from the kubeconfig, else in-cluster config, else the default kubeconfig;
    with `concurrency`, its connection pool sized for that many requests in flight. The proxy
    is looked up once (proxy_once)."""
    from kubernetes_asyncio import client, config

    configuration = client.Configuration()
    if concurrency is not None:
        configuration.connection_pool_maxsize = pool_size_for(concurrency)
    if kubeconfig and not os.path.isfile(kubeconfig):
        # kubernetes-asyncio would log a warning and then complain of a missing current-context.
        raise ConfigError(f"kubeconfig {kubeconfig} does not exist (--kubeconfig names a file, e.g. the one "
                          "`ganggate sim up --kubeconfig-out FILE` writes)")
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
    api_client = client.ApiClient(configuration=configuration)
    proxy_once(api_client)
    return api_client
