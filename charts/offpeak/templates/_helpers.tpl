{{/* Chart name, truncated to the 63 characters Kubernetes allows in names and labels. */}}
{{- define "offpeak.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Release-qualified name; component names append "-<component>", so keep room for it (63 - 12). */}}
{{- define "offpeak.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 51 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 51 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 51 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Name of one component's objects: (dict "root" $ "component" "operator"). */}}
{{- define "offpeak.componentName" -}}
{{- printf "%s-%s" (include "offpeak.fullname" .root) .component }}
{{- end }}

{{- define "offpeak.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "offpeak.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: offpeak
{{- end }}

{{- define "offpeak.selectorLabels" -}}
app.kubernetes.io/name: {{ include "offpeak.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* The offpeak image (one image, many subcommands); tag defaults to the chart's appVersion. */}}
{{- define "offpeak.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{- define "offpeak.predictorURL" -}}
{{- if .Values.operator.predictorURL }}
{{- .Values.operator.predictorURL }}
{{- else }}
{{- printf "http://%s.%s.svc:%d" (include "offpeak.componentName" (dict "root" . "component" "predictor")) .Release.Namespace (int .Values.predictor.port) }}
{{- end }}
{{- end }}

{{/* Pod-level security shared by every offpeak pod. */}}
{{- define "offpeak.podSecurityContext" -}}
{{- toYaml .Values.podSecurityContext }}
{{- end }}

{{/* Container-level security shared by every offpeak container. */}}
{{- define "offpeak.containerSecurityContext" -}}
{{- toYaml .Values.containerSecurityContext }}
{{- end }}

{{/* Writable scratch space: the root filesystem is read-only. */}}
{{- define "offpeak.tmpVolume" -}}
- name: tmp
  emptyDir:
    sizeLimit: {{ .Values.tmpSizeLimit }}
{{- end }}

{{- define "offpeak.tmpMount" -}}
- name: tmp
  mountPath: /tmp
{{- end }}

{{/* Environment every offpeak process gets. */}}
{{- define "offpeak.commonEnv" -}}
- name: HOME
  value: /tmp
- name: MPLCONFIGDIR
  value: /tmp/matplotlib
- name: PYTHONUNBUFFERED
  value: "1"
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
{{- end }}

{{/* Scheduling constraints of one component: (dict "values" .Values.operator). */}}
{{- define "offpeak.placement" -}}
{{- with .values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- end }}

{{/* A ServiceMonitor for one component's Service: (dict "root" $ "component" "operator" "port" "metrics"). */}}
{{- define "offpeak.serviceMonitor" -}}
{{- if .root.Values.serviceMonitor.enabled }}
---
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata:
  name: {{ include "offpeak.componentName" . }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "offpeak.labels" . | nindent 4 }}
    {{- with .root.Values.serviceMonitor.additionalLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  namespaceSelector:
    matchNames: [{{ .root.Release.Namespace | quote }}]
  selector:
    matchLabels:
      {{- include "offpeak.selectorLabels" . | nindent 6 }}
  endpoints:
    - port: {{ .port }}
      path: /metrics
      interval: {{ .root.Values.serviceMonitor.interval }}
      scrapeTimeout: {{ .root.Values.serviceMonitor.scrapeTimeout }}
{{- end }}
{{- end }}

{{/* A PodDisruptionBudget, only when more than one replica runs: (dict "root" $ "component" "x" "replicas" n). */}}
{{- define "offpeak.pdb" -}}
{{- if gt (int .replicas) 1 }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "offpeak.componentName" . }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "offpeak.labels" . | nindent 4 }}
spec:
  maxUnavailable: 1
  selector:
    matchLabels:
      {{- include "offpeak.selectorLabels" . | nindent 6 }}
{{- end }}
{{- end }}

{{/* The Secret holding the predictor's shared token (key "token"): the user's, else the chart's own. */}}
{{- define "offpeak.tokenSecretName" -}}
{{- .Values.predictor.auth.existingSecret | default (printf "%s-predictor-token" (include "offpeak.fullname" .)) }}
{{- end }}

{{/* Where the operator and the predictor find the shared token. */}}
{{- define "offpeak.tokenDir" -}}
/var/run/secrets/offpeak/predictor-token
{{- end }}

{{- define "offpeak.tokenVolume" -}}
- name: predictor-token
  secret:
    secretName: {{ include "offpeak.tokenSecretName" . }}
    defaultMode: 0440
    items:
      - key: token
        path: token
{{- end }}

{{- define "offpeak.tokenMount" -}}
- name: predictor-token
  mountPath: {{ include "offpeak.tokenDir" . }}
  readOnly: true
{{- end }}

{{/* The site's own GPU types (values gpuCatalogue): a ConfigMap the components that name GPU types read through
$OFFPEAK_GPU_CATALOGUE. Each helper renders nothing when the catalogue is empty. */}}
{{- define "offpeak.gpuCatalogueName" -}}
{{- printf "%s-gpu-catalogue" (include "offpeak.fullname" .) }}
{{- end }}

{{- define "offpeak.gpuCatalogueEnv" -}}
{{- if .Values.gpuCatalogue.gpus }}
- name: OFFPEAK_GPU_CATALOGUE
  value: /etc/offpeak/gpu-catalogue/gpus.json
{{- end }}
{{- end }}

{{- define "offpeak.gpuCatalogueVolume" -}}
{{- if .Values.gpuCatalogue.gpus }}
- name: gpu-catalogue
  configMap:
    name: {{ include "offpeak.gpuCatalogueName" . }}
{{- end }}
{{- end }}

{{- define "offpeak.gpuCatalogueMount" -}}
{{- if .Values.gpuCatalogue.gpus }}
- name: gpu-catalogue
  mountPath: /etc/offpeak/gpu-catalogue
  readOnly: true
{{- end }}
{{- end }}
