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

{{/* Labels of every object: the chart's own (they win), then the user's commonLabels. */}}
{{- define "offpeak.labels" -}}
{{- $own := dict
  "helm.sh/chart" (printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-")
  "app.kubernetes.io/version" .root.Chart.AppVersion
  "app.kubernetes.io/managed-by" .root.Release.Service
  "app.kubernetes.io/part-of" "offpeak" }}
{{- toYaml (merge $own (include "offpeak.selectorLabels" . | fromYaml) (.root.Values.commonLabels | default dict)) }}
{{- end }}

{{- define "offpeak.selectorLabels" -}}
app.kubernetes.io/name: {{ include "offpeak.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* A pod template's metadata: the selector labels (they win), the chart's own `labels`/`annotations` for this pod,
then the component's podLabels/podAnnotations, then the global ones, then commonLabels:
(dict "root" $ "component" "operator" "values" .Values.operator ["labels" dict] ["annotations" dict]). */}}
{{- define "offpeak.podMetadata" -}}
{{- $own := .values | default dict }}
{{- $v := .root.Values }}
{{- $labels := merge (include "offpeak.selectorLabels" . | fromYaml) (.labels | default dict) ($own.podLabels | default dict) ($v.podLabels | default dict) ($v.commonLabels | default dict) }}
{{- $annotations := merge (.annotations | default dict) ($own.podAnnotations | default dict) ($v.podAnnotations | default dict) }}
labels:
  {{- toYaml $labels | nindent 2 }}
{{- with $annotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* An offpeak image: the component's own repository/tag/digest over the global `image` (a digest wins over a tag);
the tag defaults to the chart's appVersion, plus `suffix` (e.g. "-extract") when the component names no tag or
digest of its own: (dict "root" $ "image" .Values.operator.image ["suffix" "-extract"]). */}}
{{- define "offpeak.componentImage" -}}
{{- $own := .image | default dict }}
{{- $global := .root.Values.image }}
{{- $repository := $own.repository | default $global.repository }}
{{- $digest := "" }}
{{- $tag := "" }}
{{- if or $own.digest $own.tag }}
{{- $digest = $own.digest | default "" }}
{{- $tag = $own.tag | default "" }}
{{- else if .suffix }}
{{- $tag = printf "%s%s" ($global.tag | default .root.Chart.AppVersion) .suffix }}
{{- else }}
{{- $digest = $global.digest | default "" }}
{{- $tag = $global.tag | default .root.Chart.AppVersion }}
{{- end }}
{{- if $digest }}
{{- printf "%s@%s" $repository $digest }}
{{- else }}
{{- printf "%s:%s" $repository $tag }}
{{- end }}
{{- end }}

{{/* A component's pull policy, else the global one: (dict "root" $ "image" .Values.operator.image). */}}
{{- define "offpeak.pullPolicy" -}}
{{- (.image | default dict).pullPolicy | default .root.Values.image.pullPolicy }}
{{- end }}

{{/* The image of analysis pods that extract torchvision/HF graphs: offpeak's extract image. */}}
{{- define "offpeak.analysisImage" -}}
{{- include "offpeak.componentImage" (dict "root" . "image" .Values.analysis.image "suffix" "-extract") }}
{{- end }}

{{/* The operator's image: analysis.image when it extracts in its own process (analysis.extractIn: operator) and
names no image of its own, else its own over the global one. */}}
{{- define "offpeak.operatorImage" -}}
{{- $own := .Values.operator.image | default dict }}
{{- if and (eq .Values.analysis.extractIn "operator") (not (or $own.repository $own.tag $own.digest)) }}
{{- include "offpeak.analysisImage" . }}
{{- else }}
{{- include "offpeak.componentImage" (dict "root" . "image" $own) }}
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

{{/* The secondary kube-scheduler's image (docs/helm.md, "Kubernetes versions"): scheduler.image.tag when set; else
the tag of the cluster's minor in scheduler.image.tagByMinor, or the newest minor's when the cluster is one minor
newer (a kube-scheduler may be one minor older than its API server, never newer). Rendering for a real cluster
(install and upgrade, or a renderer that passes the cluster's API versions, as Argo CD does) any other minor fails,
naming the supported ones; a plain `helm template` (no cluster) renders the newest minor's tag instead. */}}
{{- define "offpeak.schedulerImage" -}}
{{- $img := .Values.scheduler.image }}
{{- $byMinor := $img.tagByMinor | default dict }}
{{- $tag := $img.tag }}
{{- if not $tag }}
{{- $lowest := 1000 }}
{{- $highest := 0 }}
{{- range $key, $_ := $byMinor }}
{{- $n := int (last (splitList "." $key)) }}
{{- if lt $n $lowest }}{{ $lowest = $n }}{{ end }}
{{- if gt $n $highest }}{{ $highest = $n }}{{ end }}
{{- end }}
{{- $newest := printf "1.%d" $highest }}
{{- $kube := .Capabilities.KubeVersion }}
{{- $minor := printf "%s.%s" $kube.Major ($kube.Minor | trimSuffix "+") }}
{{- if hasKey $byMinor $minor }}
{{- $tag = index $byMinor $minor }}
{{- else if eq $minor (printf "1.%d" (add1 $highest)) }}
{{- $tag = index $byMinor $newest }}
{{- else if .Capabilities.APIVersions.Has "apiregistration.k8s.io/v1" }}
{{- fail (printf "offpeak's secondary kube-scheduler supports Kubernetes 1.%d to 1.%d and this cluster runs %s: add its minor to scheduler.image.tagByMinor, or set scheduler.image.tag to a kube-scheduler no newer than the cluster and at most one minor older (docs/helm.md, \"Kubernetes versions\")" $lowest (add1 $highest) $kube.Version) }}
{{- else }}
{{- $tag = index $byMinor $newest }}
{{- end }}
{{- end }}
{{- if $img.digest }}
{{- printf "%s@%s" $img.repository $img.digest }}
{{- else }}
{{- printf "%s:%s" $img.repository $tag }}
{{- end }}
{{- end }}

{{/* The chart's templated CRD files, as a JSON list. */}}
{{- define "offpeak.crdFiles" -}}
{{- toJson (list "files/crds/trainingjobs.offpeak.io.yaml" "files/crds/onlinedemands.offpeak.io.yaml") }}
{{- end }}

{{/* "true" when the release may render CRD `name`: it does not exist (or there is no cluster to ask: helm
template), or this release (name and namespace) owns it: (dict "root" $ "name" "trainingjobs.offpeak.io"). */}}
{{- define "offpeak.crdOwned" -}}
{{- $existing := lookup "apiextensions.k8s.io/v1" "CustomResourceDefinition" "" .name }}
{{- $annotations := (($existing | default dict).metadata | default dict).annotations | default dict }}
{{- if or (not $existing) (and (eq (index $annotations "meta.helm.sh/release-name" | default "") .root.Release.Name) (eq (index $annotations "meta.helm.sh/release-namespace" | default "") .root.Release.Namespace)) }}true{{ end }}
{{- end }}
