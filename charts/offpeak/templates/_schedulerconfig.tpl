{{/*
The secondary kube-scheduler's configuration: profile `offpeak-scheduler` whose filter and prioritize phases call
the extender sidecar on loopback. nodeCacheCapable: only node names are sent (the extender keeps its own cache).
ignorable: if the extender is down or slow, pods are scheduled without it. managedResources: the scheduler calls
the extender only for pods that request GPUs.
*/}}
{{- define "offpeak.schedulerConfig" -}}
{{- $s := .Values.scheduler -}}
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: {{ $s.leaderElection.enabled }}
  resourceLock: leases
  resourceName: {{ $s.leaderElection.resourceName }}
  resourceNamespace: {{ .Release.Namespace }}
profiles:
  - schedulerName: {{ $s.schedulerName }}
extenders:
  - urlPrefix: http://127.0.0.1:{{ $s.extender.port }}
    filterVerb: filter
    prioritizeVerb: prioritize
    weight: {{ $s.extender.weight }}
    enableHTTPS: false
    nodeCacheCapable: true
    ignorable: true
    httpTimeout: {{ $s.extender.httpTimeout }}
    managedResources:
      - name: nvidia.com/gpu
        ignoredByScheduler: false
{{- end }}
