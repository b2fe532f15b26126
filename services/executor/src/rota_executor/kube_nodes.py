"""The node half of the `kubernetes` backend: the cluster's nodes, listed and watched; which
of the nodes that matter (those of rota.yaml and of the grants) are lost, reported as they
change; where rota.yaml and the cluster disagree; and a granted node's taints that a run's
pods do not tolerate."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

from rota.config.model import Node
from rota.k8s.inventory import InventoryError, Labels, differences, nodes_of

from rota_executor.backend import Reporter
from rota_executor.kube_calls import KubeCalls
from rota_executor.kube_pods import node_problem, untolerated_taints

log = logging.getLogger("rota.executor.kubernetes")


class NodeTracking:
    """Mixed into the backend, which provides the reporter, the calls, the runs' granted
    nodes and a way to spawn a report."""

    reporter: Reporter
    calls: KubeCalls
    config_nodes: list[Node] | None
    labels: Labels
    nodes: dict[str, dict[str, Any]]  # by name, as last listed or watched
    lost_nodes: set[str]  # nodes NotReady, cordoned or gone
    node_problems: dict[str, str | None]  # as last reported, by node
    _nodes_synced: asyncio.Event

    def granted_nodes(self) -> set[str]:
        raise NotImplementedError

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        raise NotImplementedError

    async def watch_nodes(self) -> None:
        await self.calls.list_watch(self.nodes, self._nodes_synced.set, self._refresh_lost_nodes,
                                    self.calls.core.list_node)

    def _refresh_lost_nodes(self) -> None:
        """A node of rota.yaml (or of a grant) that is NotReady, cordoned or gone is lost to
        the runs on it, and withdrawn from placement (`NodeWithdrawn`) until it is back
        (`NodeRestored`). The first pass reports every node: the scheduler may still believe
        what an executor said before this one started."""
        if not self._nodes_synced.is_set():
            return  # nodes not listed yet are not lost
        names = {n.name for n in self.config_nodes or []} | self.granted_nodes()
        now = {name: node_problem(self.nodes.get(name)) for name in names}
        for name, problem in now.items():
            if name in self.node_problems and self.node_problems[name] == problem:
                continue
            if problem is not None:
                log.warning("node %s withdrawn: %s", name, problem)
            elif name in self.node_problems:
                log.info("node %s is back", name)
            self._spawn(self.reporter.node_changed(name, problem))
        self.node_problems = now
        self.lost_nodes = {name for name, problem in now.items() if problem is not None}

    def compare_inventory(self) -> list[str]:
        """Say plainly, once at start, where rota.yaml and the live nodes disagree: the scheduler
        places by rota.yaml, so each difference is work that cannot start, or GPUs left idle."""
        if self.config_nodes is None:
            return []
        try:
            live = nodes_of(list(self.nodes.values()), self.labels)
        except InventoryError as exc:
            log.warning("rota.yaml vs the cluster: %s", exc)
            return [str(exc)]
        found = differences(self.config_nodes, live)
        for line in found:
            log.warning("rota.yaml vs the cluster: %s", line)
        if not found:
            log.info("rota.yaml matches the cluster's %d GPU nodes", len(live))
        return found

    def warn_of_taints(self, run_id: str, nodes: set[str], tolerations: list[dict[str, Any]]) -> None:
        """Rota places by rota.yaml, which knows no taints: a granted node tainted against the
        run's pods is said plainly at start (the pods stay Pending, and the run is lost at the
        start timeout, the taint named by the scheduler)."""
        for name in sorted(nodes):
            if taints := untolerated_taints(self.nodes.get(name) or {}, tolerations):
                log.warning("kubernetes run %s: node %s has taints its pods do not tolerate: %s;"
                            " they cannot be scheduled there until the job's kubernetes.tolerations"
                            " (or its pod template) tolerate them", run_id, name, ", ".join(taints))
