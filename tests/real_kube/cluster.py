"""A real Kubernetes control plane on loopback for the `real_kube` tier: etcd, kube-apiserver,
kube-controller-manager and kube-scheduler of Kubernetes v1.37.2 with admission (PodSecurity,
ServiceAccount, ResourceQuota, ...), RBAC and API Priority and Fairness on, started by `kwokctl --runtime binary`; the
kwok controller plays the kubelets of the GPU nodes after the stages of `stages.yaml`.

The binaries come from `deploy/kube-dev/build.sh`, in `$ROTA_KUBE_CACHE/bin` (default
`~/.cache/rota/kube-v1.37.2/bin`). Nothing is downloaded here: kwokctl is handed every binary.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

KUBE_VERSION = "v1.37.2"
BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "etcd",
            "kwok", "kwokctl", "helm")
STAGES = Path(__file__).with_name("stages.yaml")
BUILD = "deploy/kube-dev/build.sh"
GPU = "nvidia.com/gpu"
FLAVOR_LABEL = "nvidia.com/gpu.product"
ZONE_LABEL = "topology.kubernetes.io/zone"
GPU_TAINT = {"key": GPU, "value": "present", "effect": "NoSchedule"}
# The EvictionRequest API is alpha in 1.37: on here so that drains can be tested through it.
FEATURE_GATES = "EvictionRequestAPI=true"
RUNTIME_CONFIG = "lifecycle.k8s.io/v1alpha1=true"


def cache_bin() -> Path:
    root = os.environ.get("ROTA_KUBE_CACHE") or str(Path.home() / ".cache/rota" / f"kube-{KUBE_VERSION}")
    return Path(root) / "bin"


def missing_binaries() -> list[str]:
    return [b for b in BINARIES if not os.access(cache_bin() / b, os.X_OK)]


@dataclass(frozen=True)
class GpuNode:
    """A KWOK node as a GPU node looks to Rota: GPUs in allocatable, a product and a zone."""

    name: str
    gpus: int
    product: str
    zone: str
    hostname: str | None = None  # the kubernetes.io/hostname label, when it is not the name
    tainted: bool = False

    def manifest(self) -> dict[str, Any]:
        capacity = {GPU: str(self.gpus), "cpu": "128", "memory": "1Ti", "pods": "110"}
        return {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": self.name, "annotations": {"kwok.x-k8s.io/node": "fake"},
                         "labels": {"kubernetes.io/hostname": self.hostname or self.name,
                                    "kubernetes.io/os": "linux", "type": "kwok",
                                    FLAVOR_LABEL: self.product, ZONE_LABEL: self.zone,
                                    "rota.dev/flavor": FLAVORS[self.product]}},
            "spec": {"taints": [GPU_TAINT] if self.tainted else []},
            "status": {"capacity": capacity, "allocatable": capacity},
        }


# Two pools: four H100 nodes in zone-a, one of them with an FQDN-style hostname label unlike
# its node name; three A100 nodes in zone-b behind the NoSchedule taint GPU pools often carry.
NODES = (
    GpuNode("h100-0", 8, "NVIDIA-H100-80GB-HBM3", "zone-a"),
    GpuNode("h100-1", 8, "NVIDIA-H100-80GB-HBM3", "zone-a"),
    GpuNode("h100-2", 8, "NVIDIA-H100-80GB-HBM3", "zone-a"),
    GpuNode("h100-3", 8, "NVIDIA-H100-80GB-HBM3", "zone-a", hostname="h100-3.gpu.example.internal"),
    GpuNode("a100-0", 8, "NVIDIA-A100-SXM4-80GB", "zone-b", tainted=True),
    GpuNode("a100-1", 8, "NVIDIA-A100-SXM4-80GB", "zone-b", tainted=True),
    GpuNode("a100-2", 8, "NVIDIA-A100-SXM4-80GB", "zone-b", tainted=True),
)
FLAVORS = {"NVIDIA-H100-80GB-HBM3": "h100", "NVIDIA-A100-SXM4-80GB": "a100"}
"""A second flavor label, `rota.dev/flavor`, names the flavors as the example rota.yaml does."""


class KubectlError(RuntimeError):
    pass


@dataclass
class KubeCluster:
    name: str
    workdir: Path
    kubeconfig: Path
    bin: Path

    def env(self) -> dict[str, str]:
        return {**os.environ, "KWOK_WORKDIR": str(self.workdir), "KUBECONFIG": str(self.kubeconfig),
                "PATH": f"{self.bin}:{os.environ.get('PATH', '')}"}

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                as_user: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        argv = [str(self.bin / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args]
        if as_user is not None:
            argv.append(f"--as={as_user}")
        done = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout)
        if check and done.returncode != 0:
            raise KubectlError(f"kubectl {' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")
        return done

    def get(self, *args: str, as_user: str | None = None) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json", as_user=as_user).stdout)

    def apply(self, objects: Iterable[dict[str, Any]], *args: str, as_user: str | None = None) -> str:
        text = yaml.safe_dump_all(list(objects), sort_keys=False)
        return self.kubectl("apply", "-f", "-", *args, input=text, as_user=as_user).stdout

    def namespace(self, name: str, *, labels: dict[str, str] | None = None) -> str:
        self.apply([{"apiVersion": "v1", "kind": "Namespace",
                     "metadata": {"name": name, "labels": labels or {}}}])
        # The ServiceAccount admission plugin refuses pods until the namespace's default
        # ServiceAccount exists, which the controller-manager makes a moment later.
        wait_until(lambda: self.kubectl("get", "serviceaccount", "default", "-n", name,
                                        check=False).returncode == 0, 30, f"namespace {name} ready")
        return name

    def metrics(self) -> str:
        return self.kubectl("get", "--raw", "/metrics").stdout

    def stop(self) -> None:
        subprocess.run([str(self.bin / "kwokctl"), "delete", "cluster", "--name", self.name],
                       env=self.env(), capture_output=True, text=True, timeout=120)


def wait_until(predicate: Any, timeout: float, what: str, every: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f} s")
        time.sleep(every)


def start_cluster(workdir: Path, name: str = "rota", *, nodes: Iterable[GpuNode] = NODES,
                  extra_args: Iterable[str] = (), audit_policy: Path | None = None) -> KubeCluster:
    """Create the cluster, add the GPU nodes, and wait until they are Ready. `extra_args`:
    kwokctl's `--extra-args component=key=value` pairs; `audit_policy`: the API server's."""
    bin_dir = cache_bin()
    workdir.mkdir(parents=True, exist_ok=True)
    kubeconfig = workdir / "kubeconfig"
    cluster = KubeCluster(name=name, workdir=workdir, kubeconfig=kubeconfig, bin=bin_dir)
    argv = [str(bin_dir / "kwokctl"), "create", "cluster", "--name", name, "--runtime", "binary",
            "--kube-apiserver-binary", str(bin_dir / "kube-apiserver"),
            "--kube-controller-manager-binary", str(bin_dir / "kube-controller-manager"),
            "--kube-scheduler-binary", str(bin_dir / "kube-scheduler"),
            "--kwok-controller-binary", str(bin_dir / "kwok"),
            "--etcd-binary", str(bin_dir / "etcd"),
            "--kube-admission", "--kube-authorization", "--secure-port",
            "--kube-feature-gates", FEATURE_GATES, "--kube-runtime-config", RUNTIME_CONFIG,
            # Not --disable-qps-limits: it turns API Priority and Fairness off, and with it the
            # 429s a busy real API server answers.
            "--config", str(STAGES), "--kubeconfig", str(kubeconfig),
            "--wait", "120s"]
    for pair in extra_args:
        argv += ["--extra-args", pair]
    if audit_policy is not None:
        argv += ["--kube-audit-policy", str(audit_policy)]
    env = {**cluster.env(), "KWOK_KUBECTL_BINARY": str(bin_dir / "kubectl")}
    env.pop("KUBECONFIG", None)
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        logs = workdir / "clusters" / name / "logs"
        tails = {p.name: p.read_text(errors="replace")[-2000:] for p in sorted(logs.glob("*.log"))} \
            if logs.exists() else {}
        raise RuntimeError(f"kwokctl create cluster failed ({done.returncode}):\n{done.stderr[-4000:]}"
                           f"\n{json.dumps(tails, indent=1)}")
    cluster.apply(n.manifest() for n in nodes)
    wait_until(lambda: all(_ready(n) for n in cluster.get("nodes")["items"]), 60, "GPU nodes Ready")
    return cluster


def _ready(node: dict[str, Any]) -> bool:
    """Ready, and no longer tainted not-ready by the node lifecycle controller, which lifts its
    taint a moment after the node reports Ready."""
    ready = any(c["type"] == "Ready" and c["status"] == "True"
                for c in (node.get("status") or {}).get("conditions") or [])
    return ready and not any(t["key"].startswith("node.kubernetes.io/")
                             for t in node["spec"].get("taints") or [])


def helm() -> Path:
    path = cache_bin() / "helm"
    if not os.access(path, os.X_OK):
        raise FileNotFoundError(f"{path}: not built; run {BUILD}")
    return path


def not_run_line() -> str:
    """The one line a run prints when this tier cannot run, and why."""
    return (f"real_kube tier NOT RUN: {', '.join(missing_binaries())} not in {cache_bin()}; "
            f"build them with `{BUILD}` (about 25 minutes cold)")


def main(argv: list[str]) -> int:
    """`python -m tests.real_kube.cluster up|down DIR`: the tier's cluster by hand, for trying
    `rota up --executor kubernetes --kubeconfig DIR/kubeconfig` against it. Its processes keep
    running after `up` returns, until `down`."""
    if len(argv) != 2 or argv[0] not in ("up", "down"):
        print("usage: python -m tests.real_kube.cluster up|down DIR", file=sys.stderr)
        return 2
    workdir = Path(argv[1]).resolve()
    if missing_binaries():
        print(not_run_line(), file=sys.stderr)
        return 1
    if argv[0] == "up":
        cluster = start_cluster(workdir)
        print(f"KWOK cluster up; kubeconfig: {cluster.kubeconfig}")
    else:
        KubeCluster("rota", workdir, workdir / "kubeconfig", cache_bin()).stop()
        print("KWOK cluster deleted")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
