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
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rota.k8s import manifests as k

from tests.real_kube.cluster import KubeCluster

Pod = dict[str, Any]


@dataclass
class LocalKubelet:
    cluster: KubeCluster
    namespace: str
    root: Path
    cwd: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)  # by pod uid
    pods_seen: dict[str, Pod] = field(default_factory=dict)  # by pod uid, as last seen
    last_seen_at: dict[str, float] = field(default_factory=dict)  # wall-clock seconds, by uid
    _termed: set[str] = field(default_factory=set)
    _reported: set[str] = field(default_factory=set)
    _mounts: dict[str, dict[str, Path]] = field(default_factory=dict)  # uid -> mountPath -> here
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="kwok-kubelet", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)

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
        for pod in pods["items"]:
            uid = pod["metadata"]["uid"]
            present.add(uid)
            self.pods_seen[uid] = pod
            self.last_seen_at[uid] = now
            deleting = bool(pod["metadata"].get("deletionTimestamp"))
            phase = (pod.get("status") or {}).get("phase")
            if uid not in self.procs and phase == "Running" and not deleting:
                self._run(pod)
            proc = self.procs.get(uid)
            if proc is None:
                continue
            self._write_notice(pod)
            if deleting and uid not in self._termed and proc.poll() is None:
                self._termed.add(uid)
                os.killpg(proc.pid, signal.SIGTERM)
            if proc.poll() is not None and uid not in self._reported and not deleting:
                self._reported.add(uid)
                self.cluster.kubectl("annotate", "pod", pod["metadata"]["name"], "-n", self.namespace,
                                     f"rota.dev/kwok-exit={proc.returncode}", "--overwrite", check=False)
        for uid, proc in self.procs.items():
            if uid not in present and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)  # the grace ran out: the pod is gone

    def _secret(self, name: str) -> dict[str, str]:
        done = self.cluster.kubectl("get", "secret", name, "-n", self.namespace, "-o", "json", check=False)
        if done.returncode != 0:
            return {}
        data = json.loads(done.stdout).get("data") or {}
        return {key: base64.b64decode(value).decode() for key, value in data.items()}

    def _write_notice(self, pod: Pod) -> None:
        here = self._mounts.get(pod["metadata"]["uid"], {}).get(k.NOTICE_DIR)
        if here is not None:
            value = (pod["metadata"].get("annotations") or {}).get(k.ANNOTATION_NOTICE, "")
            (here / "notice").write_text(value)

    def _run(self, pod: Pod) -> None:
        uid, name = pod["metadata"]["uid"], pod["metadata"]["name"]
        spec = pod["spec"]
        container = spec["containers"][0]
        volumes = {v["name"]: v for v in spec.get("volumes") or []}
        mounts: dict[str, Path] = {}
        for mount in container.get("volumeMounts") or []:
            here = self.root / name / mount["name"]
            here.mkdir(parents=True, exist_ok=True)
            secret = (volumes.get(mount["name"]) or {}).get("secret")
            if secret is not None:
                data = self._secret(secret["secretName"])
                for item in secret.get("items") or []:
                    if item["key"] in data:
                        (here / item["path"]).write_text(data[item["key"]])
            mounts[mount["mountPath"]] = here
        self._mounts[uid] = mounts
        self._write_notice(pod)
        env: dict[str, str] = {"PATH": os.environ.get("PATH", ""), "PYTHONUNBUFFERED": "1",
                               "HOME": str(self.root)}
        annotations = pod["metadata"].get("annotations") or {}
        for entry in container.get("env") or []:
            source = entry.get("valueFrom") or {}
            if "value" in entry:
                env[entry["name"]] = entry["value"]
            elif "fieldRef" in source:
                key = source["fieldRef"]["fieldPath"].split("['")[1].rstrip("']")
                env[entry["name"]] = annotations.get(key, "")
            elif "secretKeyRef" in source:
                ref = source["secretKeyRef"]
                env[entry["name"]] = self._secret(ref["name"]).get(ref["key"], "")
        checkpoints = self.root / "checkpoints"  # one volume shared by every run, as a PVC would be
        checkpoints.mkdir(parents=True, exist_ok=True)
        mounts.setdefault(env.get("ROTA_CHECKPOINT_DIR", "/checkpoints"), checkpoints)
        env = {key: self._local(mounts, value) for key, value in env.items()}
        argv = [*(container.get("command") or []), *(container.get("args") or [])]
        argv = [sys.executable if a == "python" else a for a in argv]
        with (self.root / f"{name}.log").open("ab") as log:
            self.procs[uid] = subprocess.Popen(argv, env=env, cwd=self.cwd, stdout=log,
                                               stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                               start_new_session=True)

    @staticmethod
    def _local(mounts: dict[str, Path], value: str) -> str:
        for pod_path, here in sorted(mounts.items(), key=lambda kv: -len(kv[0])):
            if value == pod_path or value.startswith(pod_path + "/"):
                return str(here) + value[len(pod_path):]
        return value
