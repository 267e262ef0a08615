{{/*
offpeak's alerts (docs/helm.md, "Alerts"), one group per component. Series are selected by the `job` and
`namespace` labels that this chart's ServiceMonitors give them (job: the Service's name). Each alert has a
`promtool test rules` case in tests/chart/test_prometheus_rules.py.
*/}}
{{- define "offpeak.alertRules" -}}
{{- $r := .Values.prometheusRule }}
{{- $ns := .Release.Namespace }}
{{- $job := dict }}
{{- range $c := list "operator" "predictor" "extender" "evictor" }}
{{- $_ := set $job $c (printf "job=%q, namespace=%q" (include "offpeak.componentName" (dict "root" $ "component" $c)) $ns) }}
{{- end }}
{{- $labels := $r.alertLabels | default dict -}}
groups:
  {{- if .Values.predictor.enabled }}
  - name: offpeak-predictor
    rules:
      - alert: OffpeakPredictorDown
        # down, or gone from the scrape targets altogether
        expr: up{ {{- $job.predictor -}} } == 0 or absent(up{ {{- $job.predictor -}} })
        for: {{ int $r.predictorDownMinutes }}m
        labels:
          {{- toYaml (merge (dict "severity" "critical") $labels) | nindent 10 }}
        annotations:
          summary: offpeak's runtime predictor is down
          description: >-
            No answer to Prometheus for {{ int $r.predictorDownMinutes }} minutes: new jobs get fallback
            predictions and samples are not learned (docs/helm.md, "Alerts").
  {{- end }}
  {{- if .Values.operator.enabled }}
  - name: offpeak-operator
    rules:
      - alert: OffpeakPredictorUnreachable
        # the operator's own calls fail although the predictor may be up (NetworkPolicy, token, predictorURL)
        expr: sum by (endpoint) (increase(offpeak_predictor_failures_total{ {{- $job.operator -}} }[10m])) > 0
        for: 10m
        labels:
          {{- toYaml (merge (dict "severity" "warning") $labels) | nindent 10 }}
        annotations:
          summary: the operator's calls to the predictor fail
          description: >-
            {{ "{{" }} $value | humanize {{ "}}" }} calls to {{ "{{" }} $labels.endpoint {{ "}}" }} failed in 10
            minutes (docs/helm.md, "Alerts").
      - alert: OffpeakPredictionDrift
        # the median actual/predicted runtime of the day's finished jobs, once enough jobs finished
        expr: >-
          (
            histogram_quantile(0.5, sum by (le) (increase(offpeak_prediction_error_ratio_bucket{ {{- $job.operator -}} }[1d]))) > {{ $r.predictionDriftFactor }}
          or
            histogram_quantile(0.5, sum by (le) (increase(offpeak_prediction_error_ratio_bucket{ {{- $job.operator -}} }[1d]))) < {{ divf 1.0 $r.predictionDriftFactor }}
          )
          and on ()
            sum(increase(offpeak_prediction_error_ratio_count{ {{- $job.operator -}} }[1d])) >= {{ int $r.predictionDriftMinJobs }}
        for: 1h
        labels:
          {{- toYaml (merge (dict "severity" "warning") $labels) | nindent 10 }}
        annotations:
          summary: runtime predictions drift from the jobs' actual runtimes
          description: >-
            The day's median job ran {{ "{{" }} printf "%.2f" $value {{ "}}" }} times its predicted time
            (docs/helm.md, "Alerts").
  {{- end }}
  {{- if .Values.scheduler.enabled }}
  - name: offpeak-extender
    rules:
      - alert: OffpeakExtenderErrors
        # requests answered without a decision; the scheduler then places without the extender (ignorable)
        expr: >-
          sum(rate(offpeak_extender_requests_total{ {{- $job.extender -}} , outcome=~"error|too-large|deadline|internal-error"}[5m]))
          / sum(rate(offpeak_extender_requests_total{ {{- $job.extender -}} }[5m])) > {{ $r.extenderErrorRatio }}
        for: 10m
        labels:
          {{- toYaml (merge (dict "severity" "warning") $labels) | nindent 10 }}
        annotations:
          summary: the scheduler extender fails requests
          description: >-
            {{ "{{" }} $value | humanizePercentage {{ "}}" }} of the extender's calls fail; their pods are placed
            without idle-window checks (docs/helm.md, "Alerts").
      - alert: OffpeakExtenderSlow
        expr: >-
          histogram_quantile(0.99, sum by (le, verb) (rate(offpeak_extender_decision_seconds_bucket{ {{- $job.extender -}} }[5m])))
          > {{ $r.extenderP99Seconds }}
        for: 10m
        labels:
          {{- toYaml (merge (dict "severity" "warning") $labels) | nindent 10 }}
        annotations:
          summary: the scheduler extender is slow
          description: >-
            p99 of {{ "{{" }} $labels.verb {{ "}}" }} decisions: {{ "{{" }} $value | humanizeDuration {{ "}}" }}; the
            scheduler waits {{ .Values.scheduler.extender.httpTimeout }} at most (docs/helm.md, "Alerts").
  {{- end }}
  {{- if .Values.evictor.enabled }}
  - name: offpeak-evictor
    rules:
      - alert: OffpeakEvictionSurge
        expr: sum(increase(offpeak_evictions_total{ {{- $job.evictor -}} }[15m])) > {{ int $r.evictionsPer15m }}
        labels:
          {{- toYaml (merge (dict "severity" "warning") $labels) | nindent 10 }}
        annotations:
          summary: many offline pods evicted at once
          description: >-
            {{ "{{" }} $value | humanize {{ "}}" }} offline pods evicted for online work in 15 minutes
            (docs/helm.md, "Alerts").
  {{- end }}
{{- end }}
