"""The node half of the `kubernetes` backend: the cluster's nodes, listed and watched; which
of the nodes that matter (those of rota.yaml and of the grants) are lost, withdrawn or
cordoned, reported as they change; where rota.yaml and the cluster disagree; and a granted
node's taints that a run's pods do not tolerate.

How a node's trouble reaches its runs (DECISIONS 100):
- cordoned (`spec.unschedulable`): a drain (`NodeDrainRequested`, deadline
  `ROTA_KUBE_DRAIN_DEADLINE_S` from now), never a loss: its runs checkpoint and move as a
  `rota cluster drain` has them do; an uncordon this process sees ends the drain;
- NotReady: withdrawn from placement at once (`NodeWithdrawn`), its runs left alone; still
  NotReady after `ROTA_NODE_LOST_GRACE_S` (Kubernetes' own eviction default, 300 s), lost:
  its runs end `lost` and requeue from their last checkpoint;
- deleted: lost at once.
"""

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
    lost_nodes: set[str]  # nodes gone, or NotReady past the grace: their runs are lost
    node_problems: dict[str, str | None]  # as last reported, by node
    _nodes_synced: asyncio.Event
    drain_deadline_s: float
    node_lost_grace_s: float
    not_ready_since: dict[str, float]  # clock seconds, by node NotReady now
    cordons: dict[str, bool]  # as last reported (a drain asked, or ended), by node

    def _now(self) -> float:
        raise NotImplementedError

    def granted_nodes(self) -> set[str]:
        raise NotImplementedError

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        raise NotImplementedError

    async def watch_nodes(self) -> None:
        await self.calls.list_watch(self.nodes, self._nodes_synced.set, self._refresh_lost_nodes,
                                    self.calls.core.list_node)

    def _refresh_lost_nodes(self) -> None:
        """A node of rota.yaml (or of a grant) that is NotReady or gone is withdrawn from
        placement (`NodeWithdrawn`) until it is back (`NodeRestored`); gone, or NotReady past
        the grace, it is lost to the runs on it. A cordoned one is drained instead (see the
        module's docstring). The first pass reports every node: the scheduler may still
        believe what an executor said before this one started. Called by every pass, so a
        grace runs out without a node event."""
        if not self._nodes_synced.is_set():
            return  # nodes not listed yet are not lost
        clock = self._now()
        names = {n.name for n in self.config_nodes or []} | self.granted_nodes()
        now: dict[str, str | None] = {}
        lost: set[str] = set()
        for name in names:
            node = self.nodes.get(name)
            problem = node_problem(node, cordon_is_a_problem=False)
            if problem == "NotReady":
                since = self.not_ready_since.setdefault(name, clock)
                if clock - since >= self.node_lost_grace_s:
                    lost.add(name)
            else:
                self.not_ready_since.pop(name, None)
                if problem is not None:
                    lost.add(name)
            now[name] = problem
            self._report_cordon(name, node)
        for name, problem in now.items():
            if name in self.node_problems and self.node_problems[name] == problem:
                continue
            if problem is not None:
                log.warning("node %s withdrawn from placement: %s%s", name, problem,
                            "" if name in lost else f"; its runs are left alone for"
                            f" {self.node_lost_grace_s:.0f} s")
            elif name in self.node_problems:
                log.info("node %s is back", name)
            self._spawn(self.reporter.node_changed(name, problem))
        for name in sorted(lost - self.lost_nodes):
            log.warning("node %s lost: its runs end and requeue from their last checkpoint", name)
        self.node_problems = now
        self.lost_nodes = lost

    def _report_cordon(self, name: str, node: dict[str, Any] | None) -> None:
        """A cordon starts a drain, once; an uncordon this process saw ends it. A node found
        uncordoned at start is not reported: that would end an admin's `rota cluster drain`."""
        cordoned = bool(node is not None and (node.get("spec") or {}).get("unschedulable"))
        before = self.cordons.get(name)
        if before == cordoned or (before is None and not cordoned):
            self.cordons[name] = cordoned
            return
        self.cordons[name] = cordoned
        if cordoned:
            log.warning("node %s cordoned: draining it, deadline in %.0f s", name,
                        self.drain_deadline_s)
            self._spawn(self.reporter.node_drain(name, self.drain_deadline_s, "cordoned"))
        else:
            log.info("node %s uncordoned: its drain ends", name)
            self._spawn(self.reporter.node_drain(name, None, "uncordoned"))

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
