"""What a team's `kubernetes:` template may not do, checked at submission: nothing that reaches
past its own pods into the runs' namespace or the node.

Refused whatever `rota.yaml` says: host namespaces, host paths and ports, privileged or
escalating containers, added capabilities beyond `NET_BIND_SERVICE`, root (`runAsUser: 0`,
`runAsNonRoot: false`), an unmasked /proc, unconfined seccomp or AppArmor, SELinux users and
roles, unsafe sysctls, Windows host processes, `nodeName` (Rota pins each pod to its granted
node), a service-account token (automounted or projected), and Rota's own objects (`rota-*`:
run Secrets, the chart's Secrets). Allowed only as the `kubernetes:` section of `rota.yaml`
says (`rota.config.kubernetes`): service accounts, volume types, and each team's Secrets and
PersistentVolumeClaims.

The executor also hardens every run pod (`rota.k8s.manifests`), and the runs' namespace may
enforce Pod Security Admission: this check is what tells the team why, with the field, before
its job waits its turn.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from rota.config.kubernetes import KubernetesPolicy, is_rota_own
from rota.contracts.job import KubernetesRun

SAFE_CAPABILITIES = frozenset({"NET_BIND_SERVICE"})
"""The one capability Pod Security Admission's `restricted` level lets a container add."""

SAFE_SYSCTLS = frozenset({
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes"})
"""Namespaced sysctls Kubernetes calls safe (Pod Security's `baseline` list): they reach no
other pod."""

SELINUX_TYPES = frozenset({"container_t", "container_init_t", "container_kvm_t",
                           "container_engine_t"})
HOST_NAMESPACES = {"hostNetwork": "the node's network", "hostPID": "the node's processes",
                   "hostIPC": "the node's IPC"}
CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"


@dataclass(frozen=True)
class Violation:
    """`field` is the path in the job spec, e.g. `kubernetes.pod_template.spec.hostNetwork`."""

    field: str
    message: str


def check_pod_policy(template: KubernetesRun, team: str,
                     policy: KubernetesPolicy) -> Violation | None:
    """The first thing in `template` that `team` may not do under `policy`; None if none."""
    return next(_violations(template, _Allowed(team, policy)), None)


@dataclass(frozen=True)
class _Allowed:
    team: str
    policy: KubernetesPolicy

    def secret(self, name: object) -> bool:
        return (isinstance(name, str) and not is_rota_own(name)
                and name in self.policy.team(self.team).secrets)

    def claim(self, name: object) -> bool:
        return (isinstance(name, str) and not is_rota_own(name)
                and name in self.policy.team(self.team).pvcs)

    def service_account(self, name: object) -> bool:
        return (isinstance(name, str) and not is_rota_own(name)
                and name in self.policy.service_accounts_of(self.team))


def _violations(template: KubernetesRun, allowed: _Allowed) -> Iterator[Violation]:
    if template.service_account is not None:
        yield from _service_account("kubernetes.service_account", template.service_account,
                                    allowed)
    for i, volume in enumerate(template.volumes):
        yield from _volume(f"kubernetes.volumes.{i}", volume, allowed)
    for i, mount in enumerate(template.volume_mounts):
        yield from _mount(f"kubernetes.volume_mounts.{i}", mount)
    pod = template.pod_template
    metadata = _mapping(pod.get("metadata"))
    for key, value in _mapping(metadata.get("annotations")).items():
        if key.startswith(APPARMOR_ANNOTATION) and value == "unconfined":
            yield Violation(f"kubernetes.pod_template.metadata.annotations.{key}",
                            "an unconfined AppArmor profile is not allowed")
    yield from _pod_spec("kubernetes.pod_template.spec", _mapping(pod.get("spec")), allowed)


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _one_of(value: object, names: frozenset[str]) -> bool:
    return isinstance(value, str) and value in names


def _items(value: object) -> Iterator[tuple[int, Mapping[str, Any]]]:
    if isinstance(value, list):
        for i, item in enumerate(value):
            if isinstance(item, Mapping):
                yield i, item


def _service_account(at: str, name: object, allowed: _Allowed) -> Iterator[Violation]:
    if not allowed.service_account(name):
        accounts = ", ".join(sorted(allowed.policy.service_accounts_of(allowed.team)))
        yield Violation(at, f"service account {name!r} is not one team {allowed.team!r} may run"
                            f" as (kubernetes.service_accounts in rota.yaml: {accounts or 'none'})")


def _pod_spec(at: str, spec: Mapping[str, Any], allowed: _Allowed) -> Iterator[Violation]:
    for key, what in HOST_NAMESPACES.items():
        if spec.get(key) is True:
            yield Violation(f"{at}.{key}", f"sharing {what} is not allowed")
    if "nodeName" in spec:
        yield Violation(f"{at}.nodeName", "Rota places each pod on its granted node")
    if spec.get("automountServiceAccountToken") is True:
        yield Violation(f"{at}.automountServiceAccountToken",
                        "run pods get no service-account token")
    for key in ("serviceAccountName", "serviceAccount"):
        if key in spec:
            yield from _service_account(f"{at}.{key}", spec[key], allowed)
    for i, ref in _items(spec.get("imagePullSecrets")):
        if not allowed.secret(ref.get("name")):
            yield _secret_refused(f"{at}.imagePullSecrets.{i}.name", ref.get("name"), allowed)
    context = _mapping(spec.get("securityContext"))
    yield from _security_context(f"{at}.securityContext", context)
    for i, sysctl in _items(context.get("sysctls")):
        if not _one_of(sysctl.get("name"), SAFE_SYSCTLS):
            yield Violation(f"{at}.securityContext.sysctls.{i}.name",
                            f"sysctl {sysctl.get('name')!r} is not one of Kubernetes' safe ones")
    for i, volume in _items(spec.get("volumes")):
        yield from _volume(f"{at}.volumes.{i}", volume, allowed)
    for key in CONTAINER_LISTS:
        for i, container in _items(spec.get(key)):
            yield from _container(f"{at}.{key}.{i}", container, allowed)


def _container(at: str, container: Mapping[str, Any], allowed: _Allowed) -> Iterator[Violation]:
    context = _mapping(container.get("securityContext"))
    if context.get("privileged") is True:
        yield Violation(f"{at}.securityContext.privileged", "privileged containers are not allowed")
    if context.get("allowPrivilegeEscalation") is True:
        yield Violation(f"{at}.securityContext.allowPrivilegeEscalation",
                        "privilege escalation is not allowed")
    added = _mapping(context.get("capabilities")).get("add")
    for i, capability in enumerate(added if isinstance(added, list) else []):
        if not _one_of(capability, SAFE_CAPABILITIES):
            yield Violation(f"{at}.securityContext.capabilities.add.{i}",
                            f"capability {capability!r} is not allowed (only"
                            f" {', '.join(sorted(SAFE_CAPABILITIES))})")
    if context.get("procMount", "Default") != "Default":
        yield Violation(f"{at}.securityContext.procMount", "only the Default /proc mount is allowed")
    yield from _security_context(f"{at}.securityContext", context)
    for i, port in _items(container.get("ports")):
        if port.get("hostPort"):
            yield Violation(f"{at}.ports.{i}.hostPort", "a port on the node is not allowed")
    for i, mount in _items(container.get("volumeMounts")):
        yield from _mount(f"{at}.volumeMounts.{i}", mount)
    for i, env in _items(container.get("env")):
        ref = _mapping(_mapping(env.get("valueFrom")).get("secretKeyRef"))
        if ref and not allowed.secret(ref.get("name")):
            yield _secret_refused(f"{at}.env.{i}.valueFrom.secretKeyRef.name", ref.get("name"),
                                  allowed)
    for i, source in _items(container.get("envFrom")):
        ref = _mapping(source.get("secretRef"))
        if ref and not allowed.secret(ref.get("name")):
            yield _secret_refused(f"{at}.envFrom.{i}.secretRef.name", ref.get("name"), allowed)


def _security_context(at: str, context: Mapping[str, Any]) -> Iterator[Violation]:
    """What the pod's and each container's securityContext share."""
    if context.get("runAsUser") == 0:
        yield Violation(f"{at}.runAsUser", "running as root (uid 0) is not allowed")
    if context.get("runAsNonRoot") is False:
        yield Violation(f"{at}.runAsNonRoot", "runs must not run as root")
    for key in ("seccompProfile", "appArmorProfile"):
        if _mapping(context.get(key)).get("type") == "Unconfined":
            yield Violation(f"{at}.{key}.type", f"an Unconfined {key} is not allowed")
    selinux = _mapping(context.get("seLinuxOptions"))
    for key in ("user", "role"):
        if selinux.get(key):
            yield Violation(f"{at}.seLinuxOptions.{key}", f"setting an SELinux {key} is not allowed")
    if "type" in selinux and not _one_of(selinux["type"], SELINUX_TYPES):
        yield Violation(f"{at}.seLinuxOptions.type",
                        f"SELinux type {selinux['type']!r} is not one of"
                        f" {', '.join(sorted(SELINUX_TYPES))}")
    if _mapping(context.get("windowsOptions")).get("hostProcess") is True:
        yield Violation(f"{at}.windowsOptions.hostProcess", "host processes are not allowed")


def _mount(at: str, mount: Mapping[str, Any]) -> Iterator[Violation]:
    if mount.get("mountPropagation") == "Bidirectional":
        yield Violation(f"{at}.mountPropagation",
                        "Bidirectional propagation reaches the node's mounts")


def _volume(at: str, volume: Mapping[str, Any], allowed: _Allowed) -> Iterator[Violation]:
    kinds = [key for key in volume if key != "name"]
    allowed_kinds = allowed.policy.volume_types
    for kind in kinds:
        if kind not in allowed_kinds:
            yield Violation(f"{at}.{kind}", f"{kind} volumes are not allowed (kubernetes."
                                            f"volume_types in rota.yaml: {', '.join(allowed_kinds)})")
            return
    source = _mapping(volume.get(kinds[0])) if kinds else {}
    kind = kinds[0] if kinds else ""
    if kind == "secret" and not allowed.secret(source.get("secretName")):
        yield _secret_refused(f"{at}.secret.secretName", source.get("secretName"), allowed)
    elif kind == "persistentVolumeClaim" and not allowed.claim(source.get("claimName")):
        claims = ", ".join(allowed.policy.team(allowed.team).pvcs)
        yield Violation(f"{at}.persistentVolumeClaim.claimName",
                        f"claim {source.get('claimName')!r} is not one team {allowed.team!r} may"
                        f" mount (kubernetes.teams.{allowed.team}.pvcs in rota.yaml:"
                        f" {claims or 'none'})")
    elif kind == "csi":
        ref = _mapping(source.get("nodePublishSecretRef"))
        if ref and not allowed.secret(ref.get("name")):
            yield _secret_refused(f"{at}.csi.nodePublishSecretRef.name", ref.get("name"), allowed)
    elif kind == "projected":
        for i, projection in _items(source.get("sources")):
            where = f"{at}.projected.sources.{i}"
            if "serviceAccountToken" in projection:
                yield Violation(f"{where}.serviceAccountToken",
                                "run pods get no service-account token")
            secret = _mapping(projection.get("secret"))
            if secret and not allowed.secret(secret.get("name")):
                yield _secret_refused(f"{where}.secret.name", secret.get("name"), allowed)


def _secret_refused(at: str, name: object, allowed: _Allowed) -> Violation:
    if isinstance(name, str) and is_rota_own(name):
        return Violation(at, f"Secret {name!r} is Rota's own (names starting 'rota-'): no run"
                             " may read it")
    secrets = ", ".join(allowed.policy.team(allowed.team).secrets)
    return Violation(at, f"Secret {name!r} is not one team {allowed.team!r} may read"
                         f" (kubernetes.teams.{allowed.team}.secrets in rota.yaml:"
                         f" {secrets or 'none'})")
