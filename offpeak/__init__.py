"""offpeak: harvest idle GPU windows on Kubernetes for offline training jobs."""

__version__ = "0.1.0"
