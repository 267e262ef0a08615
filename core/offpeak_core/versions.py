"""Pinned versions of the Kubernetes pieces offpeak is built and tested with (one home: the e2e build, the test
tools and the chart's scheduler image all read these)."""

# v1.32.x staging modules (kube-scheduler, endpointslice, ...) are not served by the module proxy here;
# v1.33.13 is the nearest release whose every needed staging module is, and kubectl 1.32 is within skew.
KUBERNETES_VERSION = "v1.33.13"
ETCD_VERSION = "v3.5.21"
KWOK_VERSION = "v0.7.0"
HELM_VERSION = "v3.16.4"
# Kueue's controller (the e2e's Kueue admission-check scenario); the module proxy here serves v0.10.0-v0.10.2 and
# not the later minors. v0.10 speaks kueue.x-k8s.io/v1beta1, the API offpeak's admission check uses.
KUEUE_VERSION = "v0.10.2"
# Kubeflow training-operator (the e2e's PyTorchJob scenario): the last v1 release, whose PyTorchJob offpeak opts in.
TRAINING_OPERATOR_VERSION = "v1.8.1"
