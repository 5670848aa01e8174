{{/* A follower agent's pod spec: mode StatefulSet (id = pod name, a claim for /work), DaemonSet (id = node name) or
Job (an on-demand pod: the leader gives its id; placement and GPUs from .Values.ondemand). */}}
{{- define "benchfleet.followerPodSpec" -}}
{{- $f := .root.Values.follower -}}
{{- $mode := .mode -}}
{{- $place := ternary .root.Values.ondemand $f (eq $mode "Job") -}}
automountServiceAccountToken: false
# SIGTERM: the agent gives every job it holds or runs back to the leader (placed again at once, as new attempts),
# stops its running point and server, and exits within about 5 s.
terminationGracePeriodSeconds: {{ $f.terminationGracePeriodSeconds }}
{{- with $place.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $place.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- if $f.sandbox }}
  # Root, for the model servers' sandbox: each server runs as nobody under bubblewrap, with no capabilities,
  # in a network namespace of its own (follower/host/sandbox.py).
  runAsUser: 0
  runAsNonRoot: false
  seccompProfile: {type: Unconfined}
  appArmorProfile: {type: Unconfined}
  {{- else }}
  runAsNonRoot: true
  runAsUser: 10001
  runAsGroup: 10001
  seccompProfile: {type: RuntimeDefault}
  {{- end }}
  {{- if $f.cpuWakeupLatency.enabled }}
  supplementalGroups: [{{ required "follower.cpuWakeupLatency.group: the GID that may write /dev/cpu_dma_latency on the nodes" $f.cpuWakeupLatency.group }}]
  {{- end }}
containers:
  - name: follower
    image: {{ include "benchfleet.imageRef" .root.Values.image.follower | quote }}
    imagePullPolicy: {{ .root.Values.image.pullPolicy }}
    args: ["follower"]
    securityContext:
      {{- if $f.sandbox }}
      # NET_ADMIN: the sandbox's veth pair, its firewall rule and link shaping; SYS_ADMIN: bubblewrap's
      # namespaces and mounts. Nothing else is added.
      capabilities: {add: ["NET_ADMIN", "SYS_ADMIN"]}
      {{- else }}
      allowPrivilegeEscalation: false
      capabilities: {drop: ["ALL"]}
      {{- end }}
    ports:
      - {name: metrics, containerPort: {{ $f.metricsPort }}}
    env:
      # What the follower records of its image in every result's reproducibility record.
      - name: BENCHFLEET_IMAGE
        value: {{ include "benchfleet.imageRef" .root.Values.image.follower | quote }}
      {{- if eq $mode "DaemonSet" }}
      # One agent per node: the node name is its id and its queue (follower.<node>).
      - name: BENCHFLEET_FOLLOWER_FOLLOWER_ID
        valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
      {{- else if eq $mode "StatefulSet" }}
      # The pod's stable name is its id and its queue: a restarted agent takes its queue back.
      - name: BENCHFLEET_FOLLOWER_FOLLOWER_ID
        valueFrom: {fieldRef: {fieldPath: metadata.name}}
      {{- end }}
      {{- /* Job: the leader names the pod's follower (its id, and that it exits after its one job). */}}
      {{- include "benchfleet.redisPasswordEnv" .root | nindent 6 }}
      - {name: BENCHFLEET_FOLLOWER_LEADER_URL, value: "http://{{ include "benchfleet.fullname" .root }}-leader:{{ .root.Values.leader.port }}"}
      - {name: BENCHFLEET_REDIS_URL, value: {{ include "benchfleet.redisUrl" .root | quote }}}
      # The database is one of the fleet's own services: no target may be it, whatever a team's allow-list opens.
      - {name: BENCHFLEET_FOLLOWER_FLEET_SERVICES, value: "{{ include "benchfleet.fullname" .root }}-mongodb:27017"}
      - {name: BENCHFLEET_FOLLOWER_WORK_DIR, value: /work}
      - {name: BENCHFLEET_FOLLOWER_METRICS_HOST, value: "0.0.0.0"}
      - {name: BENCHFLEET_FOLLOWER_METRICS_PORT, value: {{ $f.metricsPort | quote }}}
      - {name: BENCHFLEET_LOG_FORMAT, value: json}
      {{- if not $f.sandbox }}
      - {name: BENCHFLEET_SANDBOX, value: "off"}
      {{- end }}
      - name: BENCHFLEET_FOLLOWER_TOKEN
        valueFrom: {secretKeyRef: {name: {{ include "benchfleet.secretName" .root }}, key: follower-token}}
    readinessProbe:
      httpGet: {path: /metrics, port: metrics}
      periodSeconds: 10
    livenessProbe:
      httpGet: {path: /metrics, port: metrics}
      initialDelaySeconds: 30
      periodSeconds: 20
      failureThreshold: 6
    resources:
      requests:
        {{- toYaml $f.resources.requests | nindent 8 }}
      limits:
        {{- toYaml $f.resources.limits | nindent 8 }}
        {{- if gt (int $place.gpus) 0 }}
        nvidia.com/gpu: {{ $place.gpus }}
        {{- end }}
    volumeMounts:
      - {name: work, mountPath: /work}
      {{- if $f.cpuWakeupLatency.enabled }}
      - {name: cpu-dma-latency, mountPath: /dev/cpu_dma_latency}
      {{- end }}
{{- if or (ne $mode "StatefulSet") $f.cpuWakeupLatency.enabled }}
volumes:
  {{- if ne $mode "StatefulSet" }}
  - name: work
    emptyDir: {}
  {{- end }}
  {{- if $f.cpuWakeupLatency.enabled }}
  - name: cpu-dma-latency
    hostPath: {path: /dev/cpu_dma_latency, type: CharDevice}
  {{- end }}
{{- end }}
{{- end -}}
