{{/*
The NATS URL every Rota pod connects to: the bundled NATS's Service when `nats.enabled`,
otherwise `natsUrl`, an existing NATS.
*/}}
{{- define "rota.natsUrl" -}}
{{- if .Values.nats.enabled -}}
{{- printf "nats://%s-nats:4222" .Release.Name -}}
{{- else -}}
{{- required "natsUrl: the URL of an existing NATS (or set nats.enabled=true for the bundled one)" .Values.natsUrl -}}
{{- end -}}
{{- end -}}
