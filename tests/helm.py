"""Real Helm for the chart's tests: the helm v4 binary that `deploy/kube-dev/build.sh` builds
into the real_kube cache ($ROTA_KUBE_CACHE/bin, default ~/.cache/rota/kube-v1.37.2/bin).

Without that binary a test that needs it fails with one line saying so and how to build it;
it is never skipped. Nothing here reaches the network: `helm template` and `helm lint` read the
chart from disk, and Helm's own config and cache go to a temporary folder.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

CHART = Path(__file__).resolve().parents[1] / "deploy" / "helm" / "rota"
KUBE_CACHE_DEFAULT = Path.home() / ".cache" / "rota" / "kube-v1.37.2"
RELEASE = "rota"
NAMESPACE = "rota"


class HelmFailed(Exception):
    """helm exited non-zero; the message is its output."""


def kube_bin_dir() -> Path:
    """Where deploy/kube-dev/build.sh puts the binaries it builds."""
    cache = os.environ.get("ROTA_KUBE_CACHE")
    return (Path(cache) if cache else KUBE_CACHE_DEFAULT) / "bin"


def helm_binary() -> Path:
    helm = kube_bin_dir() / "helm"
    if not os.access(helm, os.X_OK):
        pytest.fail(f"the real_kube cache is not built: no {helm}; build it with "
                    "deploy/kube-dev/build.sh (or set ROTA_KUBE_CACHE to where it is)",
                    pytrace=False)
    return helm


def run_helm(*args: str) -> str:
    """helm's stdout; HelmFailed with its stderr when it exits non-zero."""
    with tempfile.TemporaryDirectory(prefix="rota-helm-") as home:
        # Helm reads and writes its own config and cache under these: a fresh folder keeps a
        # developer's repositories and plugins out of the tests.
        env = {**os.environ, "HELM_CONFIG_HOME": f"{home}/config",
               "HELM_CACHE_HOME": f"{home}/cache", "HELM_DATA_HOME": f"{home}/data"}
        done = subprocess.run([str(helm_binary()), *args], capture_output=True, text=True,
                              env=env, check=False)
    if done.returncode != 0:
        raise HelmFailed(f"helm {' '.join(args)}: exit {done.returncode}\n{done.stderr}{done.stdout}")
    return done.stdout


def _value_args(values: Mapping[str, Any] | None, sets: Sequence[str], folder: Path) -> list[str]:
    args: list[str] = []
    if values:
        values_file = folder / "values.yaml"
        values_file.write_text(yaml.safe_dump(dict(values)))
        args += ["--values", str(values_file)]
    for assignment in sets:
        args += ["--set", assignment]
    return args


def lint(chart: Path = CHART, values: Mapping[str, Any] | None = None,
         sets: Sequence[str] = ()) -> str:
    """`helm lint --strict` (a warning fails too); its report."""
    with tempfile.TemporaryDirectory(prefix="rota-values-") as folder:
        return run_helm("lint", "--strict", str(chart), *_value_args(values, sets, Path(folder)))


def template_text(chart: Path = CHART, values: Mapping[str, Any] | None = None,
                  sets: Sequence[str] = (), *, release: str = RELEASE,
                  namespace: str = NAMESPACE) -> str:
    """`helm template` (release `rota` in namespace `rota` unless told): the manifests as Helm
    prints them."""
    with tempfile.TemporaryDirectory(prefix="rota-values-") as folder:
        return run_helm("template", release, str(chart), "--namespace", namespace,
                        *_value_args(values, sets, Path(folder)))


def template(chart: Path = CHART, values: Mapping[str, Any] | None = None,
             sets: Sequence[str] = (), *, release: str = RELEASE,
             namespace: str = NAMESPACE) -> list[dict[str, Any]]:
    """`helm template`, each manifest parsed (empty documents dropped)."""
    docs = yaml.safe_load_all(template_text(chart, values, sets, release=release,
                                            namespace=namespace))
    return [doc for doc in docs if doc]


def workloads(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The Deployments and StatefulSets by component (the six services and the console)."""
    return {d["metadata"]["labels"]["app.kubernetes.io/component"]: d for d in docs
            if d["kind"] in {"Deployment", "StatefulSet"}}
