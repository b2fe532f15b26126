"""The FAKE kubelet's optional mode for the end-to-end tests: a Running pod's container runs as
a local process (its command, with the pod's env resolved from values, annotations and
Secrets), under a folder of this machine. No image, no isolation: only the job protocol is
real. `tests/fake_kube_apiserver.py` decides when a container starts and stops."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Obj = dict[str, Any]
SecretData = Callable[[str, str], dict[str, str]]  # (namespace, name) -> the Secret's stringData


@dataclass
class LocalContainers:
    """Paths a pod mounts (Secret volumes, the checkpoint dir) are mapped to folders of `root`,
    and env values naming them are rewritten."""

    root: Path
    cwd: Path
    python: str = sys.executable
    mapped: dict[str, Path] = field(default_factory=dict)  # pod path -> local path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def local(self, value: str) -> str:
        for pod_path, here in sorted(self.mapped.items(), key=lambda kv: -len(kv[0])):
            if value == pod_path or value.startswith(pod_path + "/"):
                return str(here) + value[len(pod_path):]
        return value

    def run(self, pod: Obj, secret_data: SecretData) -> None:
        name, spec, ns = pod["metadata"]["name"], pod["spec"], pod["metadata"]["namespace"]
        container = spec["containers"][0]
        volumes = {v["name"]: v for v in spec.get("volumes") or []}
        for mount in container.get("volumeMounts") or []:
            here = self.root / name / mount["name"]
            here.mkdir(parents=True, exist_ok=True)
            secret = (volumes.get(mount["name"]) or {}).get("secret")
            if secret is not None:
                data = secret_data(ns, secret["secretName"])
                for item in secret.get("items") or []:
                    if item["key"] in data:
                        (here / item["path"]).write_text(data[item["key"]])
            self.mapped[mount["mountPath"]] = here
        env: dict[str, str] = {"PATH": os.environ.get("PATH", ""), "PYTHONUNBUFFERED": "1",
                               "HOME": str(self.root)}
        for entry in container.get("env") or []:
            source = entry.get("valueFrom") or {}
            if "value" in entry:
                env[entry["name"]] = entry["value"]
            elif "fieldRef" in source:
                key = source["fieldRef"]["fieldPath"].split("['")[1].rstrip("']")
                env[entry["name"]] = pod["metadata"]["annotations"].get(key, "")
            elif "secretKeyRef" in source:
                ref = source["secretKeyRef"]
                env[entry["name"]] = secret_data(ns, ref["name"]).get(ref["key"], "")
        checkpoints = env.get("ROTA_CHECKPOINT_DIR", "/checkpoints")
        (self.root / "checkpoints").mkdir(parents=True, exist_ok=True)
        self.mapped.setdefault(checkpoints, self.root / "checkpoints")  # one volume for every run
        env = {key: self.local(value) for key, value in env.items()}
        argv = [*(container.get("command") or []), *(container.get("args") or [])]
        argv = [self.python if a == "python" else a for a in argv]
        with (self.root / f"{name}.log").open("ab") as log:
            self.procs[name] = subprocess.Popen(argv, env=env, cwd=self.cwd, stdout=log,
                                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                                start_new_session=True)

    def kill_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
