"""offpeak_operator: the kopf operator that turns TrainingJobs into predicted, schedulable training pods.

Layout: pure decisions (`jobspec`, `statemachine`, `predictions`, `graphstore`, `podspecs`, `observe`) and thin
adapters around them (`kube`, `predictor_http`, `extraction`, `metrics`, `reconciler`, `handlers`, `cli`).
"""
