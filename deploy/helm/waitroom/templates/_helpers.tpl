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
The gate's own listening port (its file's `listen`, e.g. ":8000" or "0.0.0.0:8000"), or "" when
there is no gate file or it has no listen (forward auth only).
*/}}
{{- define "waitroom.gatePort" -}}
{{- if .Values.gate.file -}}
{{- $listen := get (fromYaml .Values.gate.file) "listen" | default "" | toString -}}
{{- if $listen -}}
{{- $port := regexReplaceAll "^.*:" $listen "" -}}
{{- if not (regexMatch "^[0-9]+$" $port) -}}
{{- fail (printf "gate.file: listen %q has no port the chart can publish (\":8000\")" $listen) -}}
{{- end -}}
{{- $port -}}
{{- end -}}
{{- end -}}
{{- end }}
