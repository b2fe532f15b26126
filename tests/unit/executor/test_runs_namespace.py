"""In a cluster, the executor refuses to start with runs in its own namespace, where Rota's
auth and database Secrets are."""

from __future__ import annotations

from pathlib import Path

import pytest
from rota_executor.runs_namespace import SharedNamespaceError, check_runs_namespace


def test_runs_in_the_executors_own_namespace_are_refused_naming_the_setting(tmp_path: Path) -> None:
    own = tmp_path / "namespace"
    own.write_text("rota\n")
    with pytest.raises(SharedNamespaceError, match="ROTA_KUBE_NAMESPACE='rota'"):
        check_runs_namespace("rota", in_cluster=True, own_namespace_file=own)
    check_runs_namespace("rota-runs", in_cluster=True, own_namespace_file=own)


def test_outside_a_cluster_there_is_no_own_namespace(tmp_path: Path) -> None:
    own = tmp_path / "namespace"
    own.write_text("rota")
    check_runs_namespace("rota", in_cluster=False, own_namespace_file=own)
    check_runs_namespace("rota", in_cluster=True, own_namespace_file=tmp_path / "absent")
