#!/bin/bash
set +e
export PYTHONUNBUFFERED=1
T0=$(date +%s)
timeout 110 python3 .devrun/measure_ops.py $OUT/h200_ops.csv > $OUT/ops_log.txt 2>&1
echo "ops rc=$? $(( $(date +%s) - T0 ))s"
SKIP_DONE=.devrun/done.jsonl MEASURE_BUDGET_S=60 python3 .devrun/measure_fast.py $OUT/h200_models_rest.jsonl 2>&1 | grep -v Warn
echo "rest done $(( $(date +%s) - T0 ))s"
