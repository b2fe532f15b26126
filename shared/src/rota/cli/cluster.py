"""`rota cluster import`: the `cluster:` section of rota.yaml, read from a Kubernetes cluster."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from rota.cli.output import console, emit_json, handled
from rota.cli.untrusted import untrusted
from rota.config.loader import parse_config
from rota.k8s.inventory import (
    DEFAULT_FLAVOR_LABEL,
    DEFAULT_GPU_RESOURCE,
    DEFAULT_RACK_LABEL,
    InventoryError,
    Labels,
    cluster_section,
    differences,
    nodes_of,
)

cluster_app = typer.Typer(help="The cluster Rota places work on.", no_args_is_help=True)


async def list_nodes(kubeconfig: Path, context: str | None) -> list[dict[str, Any]]:
    from kubernetes_asyncio import client

    from rota.k8s.api import kube_client, read_json

    api = await kube_client(kubeconfig, context)
    try:
        core: Any = client.CoreV1Api(api)
        items: list[dict[str, Any]] = (await read_json(await core.list_node(
            _preload_content=False)))["items"]
        return items
    finally:
        await api.close()


@cluster_app.command("import")
@handled
def cluster_import(
    kubeconfig: Annotated[Path, typer.Option(help="The cluster's kubeconfig.")],
    context: Annotated[str | None, typer.Option(help="A context of the kubeconfig.")] = None,
    config: Annotated[Path, typer.Option(
        help="The rota.yaml whose `cluster:` section is replaced; its other sections stay.")
    ] = Path("rota.yaml"),
    gpu_resource: Annotated[str, typer.Option(help="The resource that counts GPUs.")
                            ] = DEFAULT_GPU_RESOURCE,
    flavor_label: Annotated[str, typer.Option(help="The node label naming the flavor.")
                            ] = DEFAULT_FLAVOR_LABEL,
    rack_label: Annotated[str, typer.Option(help="The node label naming the rack.")
                          ] = DEFAULT_RACK_LABEL,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print; write nothing.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Read the nodes, write the `cluster:` section of rota.yaml, and say what changed.

    The file is validated as a whole before it is written, and YAML comments in it are not
    kept (the file is rewritten)."""
    items = asyncio.run(list_nodes(kubeconfig, context))
    live = nodes_of(items, Labels(gpu_resource, flavor_label, rack_label))
    if not live:
        raise InventoryError(f"no node of the cluster allocates {gpu_resource!r}")
    doc: dict[str, Any] = {}
    before: list[Any] = []
    if config.exists():
        doc = yaml.safe_load(config.read_text()) or {}
        before = parse_config(doc, source=str(config)).expanded_nodes()
    old_flavors = {str(f.get("name")): str(f.get("description", ""))
                   for f in (doc.get("cluster") or {}).get("flavors") or [] if isinstance(f, dict)}
    section = cluster_section(live, old_flavors)
    doc["cluster"] = section
    changes = differences(before, live) if before else []
    changes += [f"flavor {f} has no node in the cluster: kept, so that quotas naming it stay valid"
                for f in sorted(old_flavors.keys() - {n.flavor for n in live})]
    if {"teams", "queues"} <= doc.keys():
        parse_config(doc, source=str(config))  # the whole file must still be valid
    written = not dry_run
    if written:
        config.write_text(yaml.safe_dump(doc, sort_keys=False))
    if json_out:
        emit_json({"ok": True, "file": str(config), "written": written, "cluster": section,
                   "changes": changes})
        return
    if dry_run:
        console.print(untrusted(yaml.safe_dump({"cluster": section}, sort_keys=False),
                                multiline=True), highlight=False)
    gpus = sum(n.gpus for n in live)
    console.print(untrusted(f"{len(live)} GPU nodes, {gpus} GPUs, flavors "
                            f"{', '.join(f['name'] for f in section['flavors'])}"
                            f"{'' if dry_run else f'; written to {config}'}"), highlight=False)
    for change in changes:
        console.print(f"  changed: {untrusted(change)}", highlight=False)
