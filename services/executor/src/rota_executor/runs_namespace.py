"""In a cluster, runs never go to the executor's own namespace: the chart keeps Rota's auth
and database Secrets there, which a run's pod could then mount, and the executor's right to
create and delete Secrets in the runs' namespace would reach them. The chart refuses such
values; this refuses them at start for any other deployment."""

from __future__ import annotations

from pathlib import Path

OWN_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
"""The namespace of the pod the executor runs in, as Kubernetes mounts it with its token."""


class SharedNamespaceError(RuntimeError):
    pass


def check_runs_namespace(runs_namespace: str, *, in_cluster: bool,
                         own_namespace_file: Path = OWN_NAMESPACE_FILE) -> None:
    """Raises SharedNamespaceError if runs would go to the executor's own namespace. Outside a
    cluster (`rota up` with a kubeconfig) there is no such namespace and nothing to check."""
    if not in_cluster:
        return
    try:
        own = own_namespace_file.read_text().strip()
    except FileNotFoundError:
        return
    if own == runs_namespace:
        raise SharedNamespaceError(
            f"ROTA_KUBE_NAMESPACE={runs_namespace!r} is the executor's own namespace, where"
            " Rota's auth and database Secrets are: runs need a namespace of their own (the"
            " Helm chart's runsNamespace)")
