"""`rota cluster`: `import` reads the `cluster:` section of rota.yaml from a Kubernetes cluster;
`drain`, `undrain` and `nodes` manage node maintenance through the bus (DECISIONS 100)."""

from __future__ import annotations

import asyncio
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from rota.cli.client import call
from rota.cli.columns import Column, Output, OutputOpt, print_table
from rota.cli.output import InvalidInput, console, emit_json, handled
from rota.cli.untrusted import untrusted
from rota.formats import moment, short
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
    import yaml

    from rota.config.loader import parse_config

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


# ---------------------------------------------------------------- drains (DECISIONS 100)

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_deadline(text: str) -> dict[str, Any]:
    """`30m`, `2h`, `90s`, `1d` (from now) or an ISO 8601 time with its zone."""
    value = text.strip().removeprefix("+")
    if value and value[-1] in _UNITS and value[:-1].replace(".", "", 1).isdigit():
        return {"deadline_s": float(value[:-1]) * _UNITS[value[-1]]}
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidInput(f"--deadline {text!r}: give a duration from now (30m, 2h, 90s, 1d)"
                           " or a time with its zone (2026-12-07T18:00:00Z)", "deadline") from None
    if when.tzinfo is None:
        raise InvalidInput(f"--deadline {text!r}: the time needs its zone (Z or +01:00)",
                           "deadline")
    return {"deadline": when}


@cluster_app.command("drain")
@handled
def cluster_drain(
    node: Annotated[str, typer.Argument(help="A node of rota.yaml.")],
    deadline: Annotated[str, typer.Option(
        help="When the node must be empty: a duration from now (30m, 2h) or a time with its"
        " zone. Runs expected to end before it are left to finish.")] = "1h",
    reason: Annotated[str, typer.Option(help="Why, for the notices and `rota cluster nodes`.")
                      ] = "maintenance",
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Drain a node (admin only): no new placement there; each run on it that is not expected
    to end before the deadline gets a notice, checkpoints, stops and resumes elsewhere, as a
    preemption with the reason `drain` that spends no preemption budget; at the deadline,
    whatever still runs there does the same. `rota cluster undrain` ends it."""
    from rota.contracts.messages import DrainNode
    from rota.contracts.subjects import API_NODE_DRAIN
    from rota.settings import get_settings

    result = call(get_settings(), API_NODE_DRAIN,
                  DrainNode(node=node, reason=reason, **parse_deadline(deadline)))
    if json_out:
        emit_json(result)
        return
    console.print(untrusted(f"node {result['node']} draining until {moment(result['deadline'])}"
                            f" ({result['reason']}); `rota cluster nodes` shows its runs"),
                  highlight=False)


@cluster_app.command("undrain")
@handled
def cluster_undrain(
    node: Annotated[str, typer.Argument(help="A node of rota.yaml.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """End a node's drain (admin only): it takes new placements again. Runs already stopped
    for the drain stay requeued."""
    from rota.contracts.messages import UndrainNode
    from rota.contracts.subjects import API_NODE_UNDRAIN
    from rota.settings import get_settings

    result = call(get_settings(), API_NODE_UNDRAIN, UndrainNode(node=node))
    if json_out:
        emit_json(result)
        return
    console.print(untrusted(f"node {result['node']} takes placements again"), highlight=False)


NODE_COLUMNS = (Column("NODE", whole=True), Column("FLAVOR"), Column("GPUS", whole=True),
                Column("STATE", whole=True), Column("REASON"), Column("RUNS"))


@cluster_app.command("nodes")
@handled
def cluster_nodes(
    node: Annotated[str | None, typer.Argument(help="Only this node.")] = None,
    output: OutputOpt = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Each node's state (ready, draining until D, drained, lost) and the runs on it, as the
    active scheduler sees them."""
    from rota.contracts.messages import ListNodes
    from rota.contracts.subjects import SCHEDULER_NODES
    from rota.settings import get_settings

    result = call(get_settings(), SCHEDULER_NODES, ListNodes(node=node))
    nodes: list[dict[str, Any]] = result["nodes"]
    if json_out:
        emit_json(nodes)
        return
    lines = []
    for row in nodes:
        state = row["state"]
        if state == "draining":
            state = f"draining until {moment(row['deadline'])}"
        runs = ", ".join(f"{short(r['job_id'])} ({r['team']}, {r['gpus']} GPUs"
                         f"{', stopping' if r['draining'] else ''})" for r in row["runs"])
        lines.append([row["node"], row["flavor"], str(row["gpus"]), state, row["reason"] or "-",
                      runs or "-"])
    print_table(console, NODE_COLUMNS, lines, wide=output is Output.wide)
