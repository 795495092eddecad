{{/* The release's base name: "mcsdns" for a release called mcsdns (or any name containing it). */}}
{{- define "mcsdns.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The labels every pod selector uses: the base's two plus Helm's instance. */}}
{{- define "mcsdns.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/component: dns
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "mcsdns.labels" -}}
{{ include "mcsdns.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- with .Values.customLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* metadata.annotations (indented for metadata), only when there are any. */}}
{{- define "mcsdns.annotations" -}}
{{- $all := merge (dict) (.extra | default dict) (.root.Values.customAnnotations | default dict) -}}
{{- with $all }}
  annotations:
    {{- toYaml . | nindent 4 }}
{{- end }}
{{- end -}}

{{- define "mcsdns.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "mcsdns.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The flags file: the listeners from .Values.ports, then .Values.flags, one per line. */}}
{{- define "mcsdns.flags" -}}
# mcsdns serve flags, rendered from the chart's values (ports, flags).
--listen=0.0.0.0:{{ .Values.ports.dns }}
--http-listen=0.0.0.0:{{ .Values.ports.metrics }}
{{- range .Values.flags }}
{{ . | replace "'" "'\"'\"'" | squote }}
{{- end }}
{{- if .Values.transfers.tsigSecret }}
--tsig-key-file=/etc/mcsdns-tsig/tsig.key
{{- end }}
{{- end -}}
