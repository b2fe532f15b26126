{{/*
The client Service's name, `<release>-nats`: the parent chart's `rota.natsUrl` names it so, and
the StatefulSet and its other objects share it.
*/}}
{{- define "nats.fullname" -}}
{{- printf "%s-nats" .Release.Name -}}
{{- end -}}

{{/* The headless Service that gives each server a DNS name for the cluster routes. */}}
{{- define "nats.headless" -}}
{{- printf "%s-nats-headless" .Release.Name -}}
{{- end -}}

{{/*
The pods' labels. The parent chart's NetworkPolicy selects the bundled NATS by name and
instance; the component sets it apart from Rota's own pods.
*/}}
{{- define "nats.selectorLabels" -}}
app.kubernetes.io/name: nats
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "nats.labels" -}}
{{ include "nats.selectorLabels" . }}
app.kubernetes.io/component: nats
app.kubernetes.io/version: {{ .Values.image.tag | quote }}
{{- end -}}

{{/* Refuses a server that would admit anyone, unless that is asked for. */}}
{{- define "nats.authSecret" -}}
{{- if and (not .Values.auth.secretName) (not .Values.allowNoAuth) -}}
{{- fail "nats.auth.secretName: the bundled NATS would run WITHOUT auth, admitting any client with every right; give it the Secret with `rota auth init`'s server.conf, or set nats.allowNoAuth=true to run it open" -}}
{{- end -}}
{{- .Values.auth.secretName -}}
{{- end -}}
