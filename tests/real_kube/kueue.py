"""The real Kueue (v0.17, built from Go modules by `deploy/kube-dev/build.sh`) on the KWOK control
plane, out of cluster: its CRDs from the module source, the manager with leader election off,
only the `batch/job` integration, TopologyAwareScheduling on, and its admission webhooks
registered with `url:` client configs on loopback and a self-signed CA, as controller-runtime's
envtest does. So Jobs are suspended, defaulted and validated by Kueue itself.

One wart, Kueue's own: with its internal certificate management off, the manager reads its
metrics server's certificate from the fixed path /etc/kueue/metrics/certs and exits when it is
missing. A certificate of our CA is written there when none is; the metrics server itself
listens on loopback only.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.real_kube.cluster import KubeCluster, cache_bin, wait_until

KUEUE_VERSION = "v0.17.0"
NAMESPACE = "kueue-system"
METRICS_CERTS = Path("/etc/kueue/metrics/certs")
QPS, BURST = 100, 200
"""Kueue's client limits, the same as the control plane's controllers get in the bench."""
GROUP_KIND_CONCURRENCY = {"Job.batch": 5, "Pod": 5, "Workload.kueue.x-k8s.io": 5, "LocalQueue.kueue.x-k8s.io": 1,
                          "Cohort.kueue.x-k8s.io": 1, "ClusterQueue.kueue.x-k8s.io": 1,
                          "ResourceFlavor.kueue.x-k8s.io": 1}
"""Reconcilers per kind, Kueue v0.17's shipped `controller.groupKindConcurrency`."""


def crds_dir() -> Path:
    return cache_bin().parent / "kueue-crds"


def webhooks_file() -> Path:
    return cache_bin().parent / "kueue-webhooks.yaml"


def missing() -> list[str]:
    """What of Kueue is not built: the binary, its CRDs or its webhook manifests."""
    out = []
    if not os.access(cache_bin() / "kueue", os.X_OK):
        out.append("kueue")
    if not (crds_dir() / "kueue.x-k8s.io_workloads.yaml").exists():
        out.append("kueue-crds")
    if not webhooks_file().exists():
        out.append("kueue-webhooks.yaml")
    return out


def not_run_line() -> str:
    return (f"Kueue NOT RUN: {', '.join(missing())} not in {cache_bin().parent}; build it with "
            "`deploy/kube-dev/build.sh` (Kueue is its last step)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def self_signed(folder: Path) -> bytes:
    """A CA and a serving certificate for 127.0.0.1 signed by it, as tls.crt/tls.key in
    `folder` (controller-runtime's file names); returns the CA's PEM."""
    folder.mkdir(parents=True, exist_ok=True)

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True, timeout=60)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=rota-bench-ca",
            "-keyout", "ca.key", "-out", "ca.crt")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
            "-keyout", "tls.key", "-out", "tls.csr")
    (folder / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl("x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-days", "2", "-extfile", "san.ext", "-out", "tls.crt")
    return (folder / "ca.crt").read_bytes()


def configuration(*, webhook_port: int, cert_dir: Path, health_port: int, metrics_port: int,
                  qps: int = QPS, burst: int = BURST) -> dict[str, Any]:
    """Kueue's Configuration (config.kueue.x-k8s.io/v1beta2) for an out-of-cluster manager."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "clientConnection": {"qps": qps, "burst": burst},
        # As Kueue's own manifests ship it (config/components/manager): without it every
        # controller has one worker, and Jobs wait long after admission to be resumed.
        "controller": {"groupKindConcurrency": GROUP_KIND_CONCURRENCY},
        "integrations": {"frameworks": ["batch/job"]},
        # The visibility API server would want an APIService and a port of its own: not needed.
        "featureGates": {"TopologyAwareScheduling": True, "VisibilityOnDemand": False},
    }


def webhook_configurations(manifests: str, *, port: int, ca: bytes) -> list[dict[str, Any]]:
    """Kueue's own webhook configurations, kept to Kueue's API and batch Jobs (the only
    integration on), each pointed at the manager on loopback by `url:` with our CA."""
    out = []
    for doc in yaml.safe_load_all(manifests):
        if not doc:
            continue
        kept = []
        for hook in doc["webhooks"]:
            groups = {g for rule in hook.get("rules") or [] for g in rule.get("apiGroups") or []}
            if not groups <= {"kueue.x-k8s.io", "batch"}:
                continue
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}",
                                    "caBundle": base64.b64encode(ca).decode()}
            kept.append(hook)
        doc["metadata"] = {"name": f"kueue-{doc['metadata']['name']}"}
        doc["webhooks"] = kept
        out.append(doc)
    return out


@dataclass
class Kueue:
    process: subprocess.Popen[bytes]
    log: Path
    health_port: int

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    def log_tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:]


def install_crds(cluster: KubeCluster) -> None:
    # Server-side: the CRDs are too large for client-side apply's last-applied annotation.
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crds_dir()), timeout=120)
    for path in sorted(crds_dir().glob("*.yaml")):
        name = yaml.safe_load(path.read_text())["metadata"]["name"]
        cluster.kubectl("wait", "--for", "condition=Established", f"crd/{name}", "--timeout", "60s",
                        timeout=90)


def start_kueue(cluster: KubeCluster, workdir: Path) -> Kueue:
    """CRDs, namespace, certificates, the manager, then its webhooks; returns once Kueue is
    ready and its Job webhook answers."""
    if missing():
        raise FileNotFoundError(not_run_line())
    workdir.mkdir(parents=True, exist_ok=True)
    install_crds(cluster)
    cluster.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}])
    certs = workdir / "certs"
    ca = self_signed(certs)
    if not (METRICS_CERTS / "tls.crt").exists():
        METRICS_CERTS.mkdir(parents=True, exist_ok=True)
        for name in ("tls.crt", "tls.key"):
            shutil.copy(certs / name, METRICS_CERTS / name)
    webhook_port, health_port, metrics_port = free_port(), free_port(), free_port()
    config_path = workdir / "kueue-config.yaml"
    config_path.write_text(yaml.safe_dump(configuration(
        webhook_port=webhook_port, cert_dir=certs, health_port=health_port, metrics_port=metrics_port)))
    log = workdir / "kueue.log"
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
    with log.open("wb") as out:
        process = subprocess.Popen([str(cache_bin() / "kueue"), "--config", str(config_path)],
                                   env=env, stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
    kueue = Kueue(process, log, health_port)
    try:
        wait_until(lambda: _ready(kueue), 180, "Kueue ready", every=0.5)
        hooks = webhook_configurations(webhooks_file().read_text(), port=webhook_port, ca=ca)
        cluster.apply(hooks)
        # The API server calls a new webhook only once its informer has seen the configuration:
        # until then a Job is stored as sent, unsuspended.
        wait_until(lambda: job_webhook_answers(cluster), 60, "Kueue's Job webhook called", every=0.5)
    except Exception as exc:
        kueue.stop()
        raise RuntimeError(f"{exc}\n--- kueue log ---\n{kueue.log_tail()}") from exc
    return kueue


def job_webhook_answers(cluster: KubeCluster, namespace: str = "default") -> bool:
    """Whether a Job for a Kueue queue in `namespace` comes back suspended from a server-side
    dry run, which runs the admission webhooks and stores nothing."""
    from rota.contracts.common import Tier
    from rota.k8s.kueue import kueue_job

    probe = kueue_job(name="webhook-probe", namespace=namespace, team="probe", tier=Tier.training,
                      workers=1, gpus_per_worker=1)
    done = cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-",
                           input=json.dumps(probe), check=False)
    return done.returncode == 0 and json.loads(done.stdout)["spec"].get("suspend") is True


def _ready(kueue: Kueue) -> bool:
    if kueue.process.poll() is not None:
        raise RuntimeError(f"kueue exited ({kueue.process.returncode})")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{kueue.health_port}/readyz", timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        time.sleep(0.3)
        return False


def uninstall(cluster: KubeCluster) -> None:
    """Kueue's webhooks first (so that nothing calls a stopped manager), then its objects."""
    for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
        for name in ("kueue-mutating-webhook-configuration", "kueue-validating-webhook-configuration"):
            cluster.kubectl("delete", kind, name, "--ignore-not-found", check=False)
