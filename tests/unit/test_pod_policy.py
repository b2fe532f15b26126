"""What a team's `kubernetes:` template may not do, as a scenario table: each way into the node
or the runs' namespace refused with the field that asked for it, and ordinary templates
accepted; then the `kubernetes:` section of `rota.yaml` as `rota config check` sees it."""

from __future__ import annotations

from typing import Any

import pytest
from rota.config import ConfigError, load_config, parse_config
from rota.config.kubernetes import KubernetesPolicy, TeamMounts
from rota.contracts.job import KubernetesRun
from rota.k8s.pod_policy import check_pod_policy

# The example rota.yaml gives team nlp the Secret nlp-wandb and the claim nlp-checkpoints.
POLICY = load_config().kubernetes
SPEC = "kubernetes.pod_template.spec"
C0 = f"{SPEC}.containers.0"


def pod(**spec: Any) -> dict[str, Any]:
    return {"pod_template": {"spec": spec}}


def container(**fields: Any) -> dict[str, Any]:
    return pod(containers=[{"name": "worker", **fields}])


def security(**context: Any) -> dict[str, Any]:
    return container(securityContext=context)


# name, the template beyond its image, the team, the refused field (None: accepted)
SCENARIOS: list[tuple[str, dict[str, Any], str, str | None]] = [
    ("a plain template", {}, "nlp", None),
    ("its own claim, Secret, configMap and scratch",
     {"volumes": [{"name": "ckpt", "persistentVolumeClaim": {"claimName": "nlp-checkpoints"}},
                  {"name": "wandb", "secret": {"secretName": "nlp-wandb"}},
                  {"name": "cfg", "configMap": {"name": "anything"}},
                  {"name": "tmp", "emptyDir": {"medium": "Memory"}}],
      "volume_mounts": [{"name": "ckpt", "mountPath": "/checkpoints"}]}, "nlp", None),
    ("a stricter securityContext of its own",
     pod(securityContext={"runAsUser": 1000, "runAsNonRoot": True, "fsGroup": 1000,
                          "seccompProfile": {"type": "RuntimeDefault"},
                          "sysctls": [{"name": "net.ipv4.tcp_keepalive_time", "value": "60"}]},
         containers=[{"name": "worker", "securityContext": {
             "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
             "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}}]), "nlp", None),
    ("the default service account, token off", {"service_account": "default",
                                                "pod_template": {"spec": {
                                                    "automountServiceAccountToken": False}}},
     "nlp", None),
    ("a projected configMap and downward API",
     {"volumes": [{"name": "p", "projected": {"sources": [
         {"configMap": {"name": "c"}}, {"downwardAPI": {"items": []}}]}}]}, "nlp", None),
    ("its own Secret through env", container(env=[{"name": "K", "valueFrom": {
        "secretKeyRef": {"name": "nlp-wandb", "key": "k"}}}]), "nlp", None),
    # the node
    ("a hostPath volume", {"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}, "nlp",
     "kubernetes.volumes.0.hostPath"),
    ("a hostPath volume in the pod template",
     pod(volumes=[{"name": "root", "hostPath": {"path": "/"}}]), "nlp", f"{SPEC}.volumes.0.hostPath"),
    ("an nfs volume", {"volumes": [{"name": "n", "nfs": {"server": "s", "path": "/"}}]}, "nlp",
     "kubernetes.volumes.0.nfs"),
    ("the node's network", pod(hostNetwork=True), "nlp", f"{SPEC}.hostNetwork"),
    ("the node's processes", pod(hostPID=True), "nlp", f"{SPEC}.hostPID"),
    ("the node's IPC", pod(hostIPC=True), "nlp", f"{SPEC}.hostIPC"),
    ("a node by name", pod(nodeName="gpu-7"), "nlp", f"{SPEC}.nodeName"),
    ("a privileged container", security(privileged=True), "nlp", f"{C0}.securityContext.privileged"),
    ("privilege escalation", security(allowPrivilegeEscalation=True), "nlp",
     f"{C0}.securityContext.allowPrivilegeEscalation"),
    ("CAP_SYS_ADMIN", security(capabilities={"add": ["NET_BIND_SERVICE", "SYS_ADMIN"]}), "nlp",
     f"{C0}.securityContext.capabilities.add.1"),
    ("root in the container", security(runAsUser=0), "nlp", f"{C0}.securityContext.runAsUser"),
    ("root in the pod", pod(securityContext={"runAsUser": 0}), "nlp", f"{SPEC}.securityContext.runAsUser"),
    ("runAsNonRoot false", security(runAsNonRoot=False), "nlp", f"{C0}.securityContext.runAsNonRoot"),
    ("an unmasked /proc", security(procMount="Unmasked"), "nlp", f"{C0}.securityContext.procMount"),
    ("seccomp unconfined", pod(securityContext={"seccompProfile": {"type": "Unconfined"}}), "nlp",
     f"{SPEC}.securityContext.seccompProfile.type"),
    ("AppArmor unconfined", security(appArmorProfile={"type": "Unconfined"}), "nlp",
     f"{C0}.securityContext.appArmorProfile.type"),
    ("AppArmor unconfined by annotation",
     {"pod_template": {"metadata": {"annotations": {
         "container.apparmor.security.beta.kubernetes.io/worker": "unconfined"}}}}, "nlp",
     "kubernetes.pod_template.metadata.annotations."
     "container.apparmor.security.beta.kubernetes.io/worker"),
    ("an SELinux user", security(seLinuxOptions={"user": "system_u"}), "nlp",
     f"{C0}.securityContext.seLinuxOptions.user"),
    ("an unsafe sysctl", pod(securityContext={"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}),
     "nlp", f"{SPEC}.securityContext.sysctls.0.name"),
    ("a Windows host process", pod(securityContext={"windowsOptions": {"hostProcess": True}}), "nlp",
     f"{SPEC}.securityContext.windowsOptions.hostProcess"),
    ("a port on the node", container(ports=[{"containerPort": 80, "hostPort": 80}]), "nlp",
     f"{C0}.ports.0.hostPort"),
    ("Bidirectional mount propagation",
     {"volume_mounts": [{"name": "d", "mountPath": "/d", "mountPropagation": "Bidirectional"}]},
     "nlp", "kubernetes.volume_mounts.0.mountPropagation"),
    ("a privileged sidecar", pod(containers=[{"name": "worker"}, {
        "name": "side", "image": "x", "securityContext": {"privileged": True}}]), "nlp",
     f"{SPEC}.containers.1.securityContext.privileged"),
    ("a privileged initContainer", pod(initContainers=[{
        "name": "init", "image": "x", "securityContext": {"privileged": True}}]), "nlp",
     f"{SPEC}.initContainers.0.securityContext.privileged"),
    ("a root ephemeral container", pod(ephemeralContainers=[{
        "name": "debug", "image": "x", "securityContext": {"runAsUser": 0}}]), "nlp",
     f"{SPEC}.ephemeralContainers.0.securityContext.runAsUser"),
    # the namespace: service accounts, tokens, Secrets, claims
    ("the executor's service account", {"service_account": "rota-executor"}, "nlp",
     "kubernetes.service_account"),
    ("a service account not allowed", {"service_account": "admin"}, "nlp",
     "kubernetes.service_account"),
    ("a service account through the pod template", pod(serviceAccountName="admin"), "nlp",
     f"{SPEC}.serviceAccountName"),
    ("the deprecated serviceAccount field", pod(serviceAccount="admin"), "nlp",
     f"{SPEC}.serviceAccount"),
    ("an automounted token", pod(automountServiceAccountToken=True), "nlp",
     f"{SPEC}.automountServiceAccountToken"),
    ("a projected service-account token",
     {"volumes": [{"name": "t", "projected": {"sources": [
         {"serviceAccountToken": {"path": "token"}}]}}]}, "nlp",
     "kubernetes.volumes.0.projected.sources.0.serviceAccountToken"),
    ("Rota's auth Secret", {"volumes": [{"name": "a", "secret": {"secretName": "rota-auth"}}]},
     "nlp", "kubernetes.volumes.0.secret.secretName"),
    ("another run's Secret",
     {"volumes": [{"name": "r", "secret": {"secretName": "rota-0190a7b2-0000-run"}}]}, "nlp",
     "kubernetes.volumes.0.secret.secretName"),
    ("another team's Secret", {"volumes": [{"name": "w", "secret": {"secretName": "nlp-wandb"}}]},
     "vision", "kubernetes.volumes.0.secret.secretName"),
    ("the database Secret through env", container(env=[{"name": "DB", "valueFrom": {
        "secretKeyRef": {"name": "rota-database", "key": "url"}}}]), "nlp",
     f"{C0}.env.0.valueFrom.secretKeyRef.name"),
    ("a Secret through envFrom", container(envFrom=[{"secretRef": {"name": "rota-auth"}}]), "nlp",
     f"{C0}.envFrom.0.secretRef.name"),
    ("a Secret projected", {"volumes": [{"name": "p", "projected": {"sources": [
        {"secret": {"name": "rota-auth"}}]}}]}, "nlp", "kubernetes.volumes.0.projected.sources.0.secret.name"),
    ("a CSI driver's Secret", {"volumes": [{"name": "c", "csi": {
        "driver": "d", "nodePublishSecretRef": {"name": "nlp-wandb"}}}]}, "nlp",
     "kubernetes.volumes.0.csi"),  # csi is not among the example's volume types
    ("an image pull Secret not given", pod(imagePullSecrets=[{"name": "registry"}]), "nlp",
     f"{SPEC}.imagePullSecrets.0.name"),
    ("another team's claim",
     {"volumes": [{"name": "c", "persistentVolumeClaim": {"claimName": "nlp-checkpoints"}}]},
     "vision", "kubernetes.volumes.0.persistentVolumeClaim.claimName"),
]


@pytest.mark.parametrize(("name", "template", "team", "field"), SCENARIOS,
                         ids=[s[0] for s in SCENARIOS])
def test_the_pod_policy(name: str, template: dict[str, Any], team: str, field: str | None) -> None:
    run = KubernetesRun.model_validate({"image": "train:1", **template})
    violation = check_pod_policy(run, team, POLICY)
    if field is None:
        assert violation is None, violation
    else:
        assert violation is not None, f"{name}: accepted"
        assert violation.field == field
        assert violation.message


def test_rotas_own_names_are_refused_even_when_listed() -> None:
    """A policy built in code (not through `rota config check`) still never gives a run Rota's
    run Secrets or the chart's Secrets."""
    loose = KubernetesPolicy(service_accounts=["default", "rota-executor"], teams={
        "nlp": TeamMounts(secrets=["rota-auth"], pvcs=["rota-db"])})
    for template, field in [
        ({"service_account": "rota-executor"}, "kubernetes.service_account"),
        ({"volumes": [{"name": "a", "secret": {"secretName": "rota-auth"}}]},
         "kubernetes.volumes.0.secret.secretName"),
        ({"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "rota-db"}}]},
         "kubernetes.volumes.0.persistentVolumeClaim.claimName"),
    ]:
        violation = check_pod_policy(KubernetesRun.model_validate({"image": "i", **template}),
                                     "nlp", loose)
        assert violation is not None and violation.field == field


def test_a_csi_volume_once_allowed_still_checks_its_secret() -> None:
    policy = KubernetesPolicy(volume_types=["csi"], teams={"nlp": TeamMounts(secrets=["nlp-s3"])})
    def run(secret: str) -> KubernetesRun:
        return KubernetesRun.model_validate({"image": "i", "volumes": [{"name": "c", "csi": {
            "driver": "d", "nodePublishSecretRef": {"name": secret}}}]})
    assert check_pod_policy(run("nlp-s3"), "nlp", policy) is None
    violation = check_pod_policy(run("rota-auth"), "nlp", policy)
    assert violation is not None and violation.field == "kubernetes.volumes.0.csi.nodePublishSecretRef.name"


BASE = {"cluster": {"flavors": [{"name": "h100"}], "nodes": [{"name": "n0", "flavor": "h100", "gpus": 8}]},
        "teams": {"nlp": {}}}

# the `kubernetes:` section, the key path `rota config check` names
CONFIG_ISSUES: list[tuple[dict[str, Any], str]] = [
    ({"volume_types": ["emptyDir", "hostPath"]}, "kubernetes.volume_types.1"),
    ({"service_accounts": ["rota-executor"]}, "kubernetes.service_accounts.0"),
    ({"teams": {"ghosts": {}}}, "kubernetes.teams.ghosts"),
    ({"teams": {"nlp": {"secrets": ["rota-auth"]}}}, "kubernetes.teams.nlp.secrets.0"),
    ({"teams": {"nlp": {"pvcs": ["Not_A_Name"]}}}, "kubernetes.teams.nlp.pvcs.0"),
    ({"teams": {"nlp": {"configmaps": ["x"]}}}, "kubernetes.teams.nlp.configmaps"),
]


@pytest.mark.parametrize(("section", "path"), CONFIG_ISSUES, ids=[p for _, p in CONFIG_ISSUES])
def test_config_check_names_the_key(section: dict[str, Any], path: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config({**BASE, "kubernetes": section})
    assert [issue.path for issue in refused.value.issues] == [path], refused.value


def test_an_absent_section_is_the_safe_default() -> None:
    policy = parse_config(BASE).kubernetes
    assert policy.service_accounts == ["default"]
    assert "hostPath" not in policy.volume_types and "csi" not in policy.volume_types
    assert policy.team("nlp") == TeamMounts()
