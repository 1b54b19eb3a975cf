{{/* The release's name, or the chart's when the release is named after it; at most 63 chars. */}}
{{- define "waitroom.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "waitroom.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "waitroom.labels" -}}
{{ include "waitroom.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "waitroom.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (include "waitroom.fullname" .) -}}
{{- else -}}
{{- .Values.serviceAccount.name | default "default" -}}
{{- end -}}
{{- end -}}

{{/* The Secret holding the keys: the user's, or the chart's. */}}
{{- define "waitroom.keysSecret" -}}
{{- .Values.keys.existingSecret | default (include "waitroom.fullname" .) -}}
{{- end -}}

{{/* The Secret holding the store URLs: the user's, or the chart's. */}}
{{- define "waitroom.storeSecret" -}}
{{- .Values.store.existingSecret | default (include "waitroom.fullname" .) -}}
{{- end -}}

{{/* Whether the chart creates its own Secret (for keys, URLs or both). */}}
{{- define "waitroom.createSecret" -}}
{{- if or (not .Values.keys.existingSecret) (not .Values.store.existingSecret) -}}true{{- end -}}
{{- end -}}

{{/* The stop's budget (values.yaml, shutdown): the preStop sleep, serve's drain and grace, and
5 s for the loops' stop and the exit. The kubelet kills the process when it runs out. */}}
{{- define "waitroom.terminationGracePeriodSeconds" -}}
{{- add .Values.shutdown.preStopSleepSeconds .Values.shutdown.drainSeconds .Values.shutdown.graceSeconds 5 -}}
{{- end -}}

{{/*
The gate's own listening port (its file's `listen`), or "" when there is no gate file or it has
no listen (forward auth only). The listen must take every address of the pod (":8000",
"0.0.0.0:8000", "[::]:8000": the Service reaches the pod's own address, not its loopback) on a
port of its own (not the http or metrics port); a file that is not YAML is refused here, not in
a crash-looping pod.
*/}}
{{- define "waitroom.gatePort" -}}
{{- if .Values.gate.file -}}
{{- $file := fromYaml .Values.gate.file -}}
{{- if hasKey $file "Error" -}}
{{- fail (printf "gate.file is not YAML: %s" (get $file "Error")) -}}
{{- end -}}
{{- if gt (len (regexFindAll "(?m)(^listen|\"listen\")[ \t]*:" .Values.gate.file -1)) 1 -}}
{{- fail "gate.file: listen is given twice (serve refuses a duplicate key)" -}}
{{- end -}}
{{- $listen := get $file "listen" | default "" | toString -}}
{{- if $listen -}}
{{- if not (regexMatch "^(0\\.0\\.0\\.0|\\[::\\])?:[1-9][0-9]{0,4}$" $listen) -}}
{{- fail (printf "gate.file: listen %q must take every address of the pod on a port: \":8000\" (a pod is reached on its own address, not its loopback)" $listen) -}}
{{- end -}}
{{- $port := regexReplaceAll "^.*:" $listen "" -}}
{{- if gt (atoi $port) 65535 -}}
{{- fail (printf "gate.file: listen %q: no such port" $listen) -}}
{{- end -}}
{{- if has (atoi $port) (list (int .Values.containerPort) (int .Values.metricsPort)) -}}
{{- fail (printf "gate.file: listen %q takes the http or metrics port of the pod (containerPort %v, metricsPort %v)" $listen .Values.containerPort .Values.metricsPort) -}}
{{- end -}}
{{- $port -}}
{{- end -}}
{{- end -}}
{{- end }}

{{/* The most pods at once: the HPA's maxReplicas (or replicaCount without it) and the one more
a rolling update starts (the Deployment's maxSurge: 1). */}}
{{- define "waitroom.mostPods" -}}
{{- add (ternary .Values.autoscaling.maxReplicas .Values.replicaCount .Values.autoscaling.enabled | int) 1 -}}
{{- end -}}

{{/* The PostgreSQL connections one pod may hold (WAITROOM_DATABASE_MAX_CONNS): its share of
store.databaseConnections among the most pods at once. serve needs at least 2 (one for
requests, one for the line's numbers). */}}
{{- define "waitroom.databaseMaxConns" -}}
{{- $pods := include "waitroom.mostPods" . | int -}}
{{- $n := div (int64 .Values.store.databaseConnections) $pods -}}
{{- if lt $n 2 -}}
{{- fail (printf "store.databaseConnections %v shared by %d pods (the most pods, %d, and one more in a rolling update) is %d each: serve needs at least 2; raise it (and PostgreSQL's max_connections) or lower the pods" .Values.store.databaseConnections $pods (sub $pods 1) $n) -}}
{{- end -}}
{{- $n -}}
{{- end -}}
