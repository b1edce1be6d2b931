{{/* The app name: the chart name unless nameOverride. */}}
{{- define "database-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Prefix of every object's name: "database-operator" for a release of that name. */}}
{{- define "database-operator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Labels of every object: those of deploy/ plus Helm's own. */}}
{{- define "database-operator.labels" -}}
app.kubernetes.io/name: {{ include "database-operator.name" . }}
app.kubernetes.io/part-of: database-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/* The operator pods' selector (as in deploy/manager). */}}
{{- define "database-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "database-operator.name" . }}
app.kubernetes.io/component: manager
{{- end }}

{{- define "database-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
