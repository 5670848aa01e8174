{{- define "benchfleet.fullname" -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "benchfleet.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "benchfleet.selector" -}}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "benchfleet.secretName" -}}
{{- .Values.tokens.existingSecret | default (printf "%s-tokens" (include "benchfleet.fullname" .)) -}}
{{- end -}}

{{/* A generated password: the one given, else the one this release's Secret already holds, else a new one. */}}
{{- define "benchfleet.password" -}}
{{- $given := index .root.Values.tokens .value -}}
{{- $existing := lookup "v1" "Secret" .root.Release.Namespace (include "benchfleet.secretName" .root) -}}
{{- if $given -}}
{{- $given -}}
{{- else if and $existing (hasKey $existing.data .key) -}}
{{- index $existing.data .key | b64dec -}}
{{- else -}}
{{- randAlphaNum 32 -}}
{{- end -}}
{{- end -}}

{{/* The URIs name $(MONGO_PASSWORD) / $(REDIS_PASSWORD): Kubernetes fills them from the env entries before them. */}}
{{- define "benchfleet.mongoUri" -}}
{{- if .Values.mongodb.enabled -}}
mongodb://{{ .Values.mongodb.user }}:$(MONGO_PASSWORD)@{{ include "benchfleet.fullname" . }}-mongodb:27017/?directConnection=true&authSource=admin
{{- else -}}
{{- required "mongodb.externalUri is required when mongodb.enabled is false" .Values.mongodb.externalUri -}}
{{- end -}}
{{- end -}}

{{- define "benchfleet.redisUrl" -}}
{{- if .Values.redis.enabled -}}
redis://:$(REDIS_PASSWORD)@{{ include "benchfleet.fullname" . }}-redis:6379/0
{{- else -}}
{{- required "redis.externalUrl is required when redis.enabled is false" .Values.redis.externalUrl -}}
{{- end -}}
{{- end -}}

{{- define "benchfleet.passwordEnv" -}}
{{- if .Values.mongodb.enabled }}
- name: MONGO_PASSWORD
  valueFrom: {secretKeyRef: {name: {{ include "benchfleet.secretName" . }}, key: mongo-password}}
{{- end }}
{{- if .Values.redis.enabled }}
- name: REDIS_PASSWORD
  valueFrom: {secretKeyRef: {name: {{ include "benchfleet.secretName" . }}, key: redis-password}}
{{- end }}
{{- end -}}

{{- define "benchfleet.redisPasswordEnv" -}}
{{- if .Values.redis.enabled }}
- name: REDIS_PASSWORD
  valueFrom: {secretKeyRef: {name: {{ include "benchfleet.secretName" . }}, key: redis-password}}
{{- end }}
{{- end -}}

{{/* An image as deployed: repository@digest where a digest is given (what the follower records of its image), else
repository:tag. */}}
{{- define "benchfleet.imageRef" -}}
{{- if .digest -}}
{{- printf "%s@%s" .repository .digest -}}
{{- else -}}
{{- printf "%s:%s" .repository .tag -}}
{{- end -}}
{{- end -}}
