{{/*
The secondary kube-scheduler's configuration: profile `offpeak-scheduler` whose filter and prioritize phases call
the extender through its Service (extender.yaml). nodeCacheCapable: only node names are sent (the extender keeps
its own cache). ignorable: if the extender is down or slow, pods are scheduled without it. managedResources: the
scheduler calls the extender only for pods that request GPUs. percentageOfNodesToScore 100: the scheduler offers
the extender every feasible node, not a sample; a gang's first worker plans places for all workers from the nodes
it is offered, and a worker whose reserved node was left out of a sample waits for a retry (docs/extender.md,
"Gang placement").
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
percentageOfNodesToScore: 100
extenders:
  - urlPrefix: {{ printf "http://%s.%s.svc:%d" (include "offpeak.componentName" (dict "root" . "component" "extender")) .Release.Namespace (int $s.extender.port) }}
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
