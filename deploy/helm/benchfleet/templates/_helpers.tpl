{{- define "benchfleet.fullname" -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "benchfleet.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "benchfleet.secretName" -}}
{{- .Values.tokens.existingSecret | default (printf "%s-tokens" (include "benchfleet.fullname" .)) -}}
{{- end -}}

{{- define "benchfleet.mongoUri" -}}
{{- if .Values.mongodb.enabled -}}
mongodb://{{ include "benchfleet.fullname" . }}-mongodb:27017/?directConnection=true
{{- else -}}
{{- required "mongodb.externalUri is required when mongodb.enabled is false" .Values.mongodb.externalUri -}}
{{- end -}}
{{- end -}}

{{- define "benchfleet.redisUrl" -}}
{{- if .Values.redis.enabled -}}
redis://{{ include "benchfleet.fullname" . }}-redis:6379/0
{{- else -}}
{{- required "redis.externalUrl is required when redis.enabled is false" .Values.redis.externalUrl -}}
{{- end -}}
{{- end -}}

{{- define "benchfleet.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end -}}
