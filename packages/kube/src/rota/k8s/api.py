"""The two calls of kubernetes-asyncio that everything Kubernetes in Rota goes through."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException


async def read_json(response: Any) -> Any:
    """Bodies are read raw (`_preload_content=False`): manifests stay the plain dicts the
    schema checks, rather than round-tripping through the generated models. The client raises
    for an error status only when it preloads, so this does it."""
    try:
        body = await response.read()
        if not 200 <= response.status < 300:
            exc = ApiException(status=response.status, reason=response.reason)
            exc.body = body.decode(errors="replace")
            raise exc
        return json.loads(body)
    finally:
        response.release()


async def kube_client(kubeconfig: Path | None, context: str | None) -> client.ApiClient:
    """From a kubeconfig file, or, without one, from the service account of the pod the
    executor runs in (the Helm chart's way)."""
    if kubeconfig is None:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
        return client.ApiClient()
    api: client.ApiClient = await config.new_client_from_config(
        config_file=str(kubeconfig), context=context)
    return api
