"""API client construction: a kubeconfig file, else the in-cluster config, else ~/.kube/config."""

from __future__ import annotations

from typing import Any


class ConfigError(Exception):
    """No usable API configuration (kubeconfig or in-cluster)."""


async def make_api_client(kubeconfig: str | None) -> Any:
    """An ApiClient from the kubeconfig, else in-cluster config, else the default kubeconfig."""
    from kubernetes_asyncio import client, config

    configuration = client.Configuration()
    try:
        if kubeconfig:
            await config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        else:
            try:
                config.load_incluster_config(client_configuration=configuration)
            except config.ConfigException:
                await config.load_kube_config(client_configuration=configuration)
    except (config.ConfigException, OSError) as exc:
        where = kubeconfig or "in-cluster config or the default kubeconfig"
        raise ConfigError(f"cannot configure API access from {where}: {exc}") from exc
    return client.ApiClient(configuration=configuration)
