"""offpeak's pure shared core: facts every component agrees on (data paths, ...). No Kubernetes, HTTP or
Prometheus imports here; components import this package, never the other way round."""
