#!/usr/bin/env bash
# Builds the real control plane the `real_kube` test tier runs on, from Go modules with the
# ordinary `go build`: kube-apiserver, kube-controller-manager, kube-scheduler, kubectl (Kubernetes
# v1.37.2), etcd v3.6.16, kwok and kwokctl v0.8.0, helm v4.3.2 and Kueue v0.17.0 (which pins its
# own k8s.io libraries; it talks to the v1.37.2 API server like any client). Each lives in a small wrapper
# module of its own beside this script (go.mod + go.sum, no Go code), so that their dependency
# graphs never have to agree with each other.
#
# The binaries go to $ROTA_KUBE_CACHE (default ~/.cache/rota/kube-v1.37.2/bin), outside git.
# A binary already there is kept; `--force` builds everything again. Prints what it does and how
# long each step took; the last line is the cache folder. Kueue's CRDs and webhook manifests are
# copied from its module source to $cache (kueue-crds/, kueue-webhooks.yaml), so that starting
# Kueue needs no Go toolchain.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
kube_version=v1.37.2
etcd_version=3.6.16
kwok_version=v0.8.0
helm_version=v4.3.2
kueue_version=v0.17.0
cache="${ROTA_KUBE_CACHE:-$HOME/.cache/rota/kube-$kube_version}"
bin="$cache/bin"
force=0
[ "${1:-}" = "--force" ] && force=1
mkdir -p "$bin"
export CGO_ENABLED=0 GOFLAGS=-trimpath

step() { echo "[kube-dev] $*" >&2; }
have() { for b in "$@"; do [ -x "$bin/$b" ] || return 1; done; [ "$force" = 0 ]; }
timed() {
  local name="$1"; shift
  local start=$SECONDS
  "$@"
  step "$name: $((SECONDS - start)) s"
}

build_kubernetes() {
  cd "$here/kubernetes"
  local v="k8s.io/component-base/version" c="k8s.io/client-go/pkg/version"
  local ld="-s -w"
  for pkg in "$v" "$c"; do
    ld+=" -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=37"
    ld+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  go build -ldflags "$ld" -o "$bin/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl
}
build_etcd() {
  cd "$here/etcd"
  go build -ldflags "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=v$etcd_version" -o "$bin/etcd" go.etcd.io/etcd/server/v3
}
build_kwok() {
  cd "$here/kwok"
  local ld="-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$kwok_version -X sigs.k8s.io/kwok/pkg/consts.KubeVersion=$kube_version"
  go build -ldflags "$ld" -o "$bin/" sigs.k8s.io/kwok/cmd/kwok sigs.k8s.io/kwok/cmd/kwokctl
}
build_helm() {
  cd "$here/helm"
  go build -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$helm_version -X helm.sh/helm/v4/internal/version.gitCommit=release" \
    -o "$bin/helm" helm.sh/helm/v4/cmd/helm
}
build_kueue() {
  cd "$here/kueue"
  go build -ldflags "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$kueue_version -X sigs.k8s.io/kueue/pkg/version.GitCommit=release" \
    -o "$bin/kueue" sigs.k8s.io/kueue/cmd/kueue
  local src
  src="$(go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)/config/components"
  rm -rf "$cache/kueue-crds" && mkdir -p "$cache/kueue-crds"
  cp "$src"/crd/bases/*.yaml "$cache/kueue-crds/" && chmod u+w "$cache/kueue-crds"/*.yaml
  cp "$src/webhook/manifests.yaml" "$cache/kueue-webhooks.yaml" && chmod u+w "$cache/kueue-webhooks.yaml"
}

total=$SECONDS
step "go: $(go version); cache: $cache"
if have kube-apiserver kube-controller-manager kube-scheduler kubectl; then step "kubernetes $kube_version: cached"
else step "kubernetes $kube_version: building (the longest step)"; timed "kubernetes $kube_version" build_kubernetes; fi
if have etcd; then step "etcd $etcd_version: cached"; else timed "etcd $etcd_version" build_etcd; fi
if have kwok kwokctl; then step "kwok $kwok_version: cached"; else timed "kwok $kwok_version" build_kwok; fi
if have helm; then step "helm $helm_version: cached"; else timed "helm $helm_version" build_helm; fi
if [ "${ROTA_SKIP_KUEUE:-0}" = 1 ]; then step "kueue $kueue_version: skipped (ROTA_SKIP_KUEUE=1)"
elif have kueue && [ -f "$cache/kueue-crds/kueue.x-k8s.io_workloads.yaml" ] && [ -f "$cache/kueue-webhooks.yaml" ]; then step "kueue $kueue_version: cached"
else timed "kueue $kueue_version" build_kueue; fi
step "done in $((SECONDS - total)) s; $(du -sh "$bin" | cut -f1) in $bin"
echo "$bin"
