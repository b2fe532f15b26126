"""The job side of a run on KWOK nodes, played by the test as a kubelet would: KWOK marks a
pod Running but runs no container, so this runs the pod's command as a local process.

For each Rota pod that KWOK reports Running, the process gets the environment a kubelet
would inject: plain values, the completion index from the pod's annotations, and the run
token read from the run's Secret (`secretKeyRef`); the Secret volume's files and the notice
file of the downward API are written under `root`, and env values naming their mount paths
point there. A pod given a deletionTimestamp gets SIGTERM; a pod gone gets SIGKILL; a process
that exits by itself has its exit code handed to KWOK (the `rota.dev/kwok-exit` annotation).

What it leaves out: images, isolation, and every pod-to-pod network path (one process per pod,
on this host)."""

from __future__ import annotations

import base64
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rota.k8s import manifests as k

from tests.fake_kube_containers import LocalContainers
from tests.real_kube.cluster import KubeCluster

Pod = dict[str, Any]
NOTICE_VOLUME = "rota-notice"  # the pod's downward-API volume, as rota.k8s.manifests names it


@dataclass
class LocalKubelet:
    cluster: KubeCluster
    namespace: str
    root: Path
    cwd: Path
    containers: LocalContainers = field(init=False)
    pods_seen: dict[str, Pod] = field(default_factory=dict)  # by pod uid, as last seen
    last_seen_at: dict[str, float] = field(default_factory=dict)  # wall-clock seconds, by uid
    _termed: set[str] = field(default_factory=set)
    _reported: set[str] = field(default_factory=set)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __post_init__(self) -> None:
        # The fast tier's fake kubelet starts a pod's process the same way; only who decides
        # when differs (here: KWOK's stages, read from the real API server).
        self.containers = LocalContainers(root=self.root, cwd=self.cwd)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="kwok-kubelet", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        self.containers.kill_all()

    def logs(self) -> dict[str, str]:
        return {p.stem: p.read_text(errors="replace") for p in sorted(self.root.glob("*.log"))}

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.step()
            except Exception as exc:  # a kubectl hiccup: the next step tries again
                print(f"kwok-kubelet: {exc}", file=sys.stderr)
            self._stop.wait(0.25)

    def step(self) -> None:
        pods = self.cluster.get("pods", "-n", self.namespace, "-l", f"{k.LABEL_MANAGED}={k.MANAGED_BY}")
        now = time.time()
        present: set[str] = set()
        procs = self.containers.procs  # by pod name: an Indexed Job's pod names are unique
        for pod in pods["items"]:
            uid, name = pod["metadata"]["uid"], pod["metadata"]["name"]
            present.add(name)
            self.pods_seen[uid] = pod
            self.last_seen_at[uid] = now
            deleting = bool(pod["metadata"].get("deletionTimestamp"))
            phase = (pod.get("status") or {}).get("phase")
            if name not in procs and phase == "Running" and not deleting:
                self._write_notice(pod)
                self.containers.run(pod, lambda _ns, secret: self._secret(secret))
            proc = procs.get(name)
            if proc is None:
                continue
            self._write_notice(pod)
            if deleting and uid not in self._termed and proc.poll() is None:
                self._termed.add(uid)
                os.killpg(proc.pid, signal.SIGTERM)
            if proc.poll() is not None and uid not in self._reported and not deleting:
                self._reported.add(uid)
                self.cluster.kubectl("annotate", "pod", name, "-n", self.namespace,
                                     f"rota.dev/kwok-exit={proc.returncode}", "--overwrite", check=False)
        for name, proc in procs.items():
            if name not in present and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)  # the grace ran out: the pod is gone

    def _secret(self, name: str) -> dict[str, str]:
        """The Secret's data as a kubelet reads it: base64 `data` from the API server."""
        done = self.cluster.kubectl("get", "secret", name, "-n", self.namespace, "-o", "json", check=False)
        if done.returncode != 0:
            return {}
        data = json.loads(done.stdout).get("data") or {}
        return {key: base64.b64decode(value).decode() for key, value in data.items()}

    def _write_notice(self, pod: Pod) -> None:
        """The downward-API notice file, refreshed from the pod's annotation at every step."""
        folder = self.root / pod["metadata"]["name"] / NOTICE_VOLUME
        folder.mkdir(parents=True, exist_ok=True)
        value = (pod["metadata"].get("annotations") or {}).get(k.ANNOTATION_NOTICE, "")
        (folder / "notice").write_text(value)


@contextmanager
def running_kubelet(cluster: KubeCluster, namespace: str, root: Path, cwd: Path) -> Iterator[LocalKubelet]:
    """The namespace made, and a kubelet playing its Rota pods until the block ends."""
    cluster.namespace(namespace)
    kubelet = LocalKubelet(cluster, namespace, root, cwd)
    kubelet.start()
    try:
        yield kubelet
    finally:
        kubelet.stop()
