"""A job's own measured pace: what a resumed job needs once it has timed its steps on a GPU type.

A prediction's p90 carries the predictor's error (p90 ≈ 1.7 × p50 today), so a job asks for a window about twice
its p50 once the extender's margin is added. After an attempt has run on a GPU type, the job's steady-state step
time there is measured (its progress reports, `offpeak.progress`), and the rest of the job on that type is known
far better than any prediction: what is left is node-to-node and run-to-run variation. So the rest of the job on a
measured type is timed at its measured pace, with a narrow p90.

Only the measured type is narrowed. The predictor's errors on one model correlate across GPU types, but not enough
to lean on: over the predictor's own held-out rows (`reports/predictor/predictions.csv.gz`), correcting one type's
prediction by another type's measured error leaves a log error of 0.33 (each family held out; 0.43 uncorrected),
and makes it worse when each GPU type is held out (0.51 against 0.38).

Pure: shared by the operator (the `offpeak.io/predicted-job-seconds` of a resumed job) and the simulator.
"""

from __future__ import annotations

from collections.abc import Iterable

# p90 / p50 of the rest of a job on a GPU type where it measured its pace. On our H100 (`runtime/offpeak-h100`,
# 96 model steps) a single step's p90 was ≤ 1.09 × its p50 for 9 in 10 models, and two ways of timing the same
# steps (synchronised each step, or back to back) differed by ≤ 6 % for 9 in 10; a pace averaged over many steps
# varies less, so 1.10 leaves room for a different node of the same type.
MEASURED_P90_RATIO = 1.10


def measured_p90_ratio(paces: Iterable[float] = ()) -> float:
    """p90 / p50 for the rest of a job on a GPU type where it measured `paces` (seconds per step, one per attempt):
    the spread of those measurements (slowest / fastest), and at least `MEASURED_P90_RATIO`."""
    valid = [float(p) for p in paces if p > 0]
    if len(valid) < 2:
        return MEASURED_P90_RATIO
    return max(MEASURED_P90_RATIO, max(valid) / min(valid))
