{{/*
The NATS URL every Rota pod connects to, and which the executor hands to run pods in the runs
namespace, so it names the Service with its namespace: the bundled NATS's when `nats.enabled`,
otherwise `natsUrl`, which defaults to the Service `nats` in the release's namespace.
*/}}
{{- define "rota.natsUrl" -}}
{{- if .Values.nats.enabled -}}
{{- printf "nats://%s-nats.%s.svc:4222" .Release.Name .Release.Namespace -}}
{{- else -}}
{{- .Values.natsUrl | default (printf "nats://nats.%s.svc:4222" .Release.Namespace) -}}
{{- end -}}
{{- end -}}

{{/*
Where NATS and PostgreSQL are, and how many replicas Rota's streams have: one list for the
services and the migrate Job alike, since a service stops at start unless the streams are as
it would make them, and only the Job (as the admin) may make them.
*/}}
{{- define "rota.storeEnv" -}}
- name: ROTA_NATS_URL
  value: {{ include "rota.natsUrl" . | quote }}
- name: ROTA_DATABASE_URL
  valueFrom:
    secretKeyRef: {name: {{ .Values.database.urlSecret.name }}, key: {{ .Values.database.urlSecret.key }}}
{{- if .Values.nats.enabled }}
# JetStream allows at most 5 replicas of a stream.
- {name: ROTA_STREAM_REPLICAS, value: {{ min (int .Values.nats.replicas) 5 | quote }}}
{{- else if .Values.streamReplicas }}
- {name: ROTA_STREAM_REPLICAS, value: {{ min (int .Values.streamReplicas) 5 | quote }}}
{{- end }}
{{- end -}}

{{/* The namespace runs' Jobs, pods, Services and Secrets go to; never the release's own. */}}
{{- define "rota.runsNamespace" -}}
{{- if eq .Values.runsNamespace .Release.Namespace -}}
{{- fail "runsNamespace: runs need a namespace of their own, not the release's (the executor may create and delete Secrets there)" -}}
{{- end -}}
{{- required "runsNamespace: the namespace runs' Jobs go to" .Values.runsNamespace -}}
{{- end -}}

{{/* Labels of every pod of the release; NetworkPolicies select Rota's pods by them. */}}
{{- define "rota.podLabels" -}}
app.kubernetes.io/name: rota
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* The pod-level securityContext: a non-root user, its group owning mounted Secret files. */}}
{{- define "rota.podSecurityContext" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: {{ int .Values.securityContext.runAsUser }}
  runAsGroup: {{ int .Values.securityContext.runAsGroup }}
  fsGroup: {{ int .Values.securityContext.runAsGroup }}
  seccompProfile: {type: RuntimeDefault}
{{- end -}}

{{/* The container-level securityContext of Pod Security Admission's `restricted` level, with a
read-only root filesystem (/tmp is an emptyDir). */}}
{{- define "rota.containerSecurityContext" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  runAsNonRoot: true
  capabilities: {drop: [ALL]}
  seccompProfile: {type: RuntimeDefault}
{{- end -}}

{{/*
The auth volume of one pod: only its own files of the auth Secret, at the paths
ROTA_NATS_AUTH_DIR=/auth names (rota.auth.keys.AuthDir). A service gets creds/<service>.creds
and roster.json; the executor also run-signing.nk (to mint run identities) and account.pub; the
console only creds/console.creds. No pod ever gets an operator or account seed.
*/}}
{{- define "rota.authVolume" -}}
- name: auth
  secret:
    secretName: {{ .root.Values.auth.secretName }}
    defaultMode: 288  # 0440: the pod's group (fsGroup) reads, nobody writes
    items:
      - {key: {{ .component }}.creds, path: creds/{{ .component }}.creds}
      {{- if ne .component "console" }}
      - {key: roster.json, path: roster.json}
      {{- end }}
      {{- if eq .component "executor" }}
      - {key: run-signing.nk, path: run-signing.nk}
      - {key: account.pub, path: account.pub}
      {{- end }}
{{- end -}}
