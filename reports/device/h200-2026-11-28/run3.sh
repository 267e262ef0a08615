#!/bin/bash
set +e
R=$(pwd)
export PYTHONPATH=$R:$R/core:$R/graph:$R/predictor PYTHONUNBUFFERED=1 OFFPEAK_CACHE=/tmp/opc
timeout 200 python3 .devrun/bigsteps.py $OUT/h200_bigsteps.sqlite 2>&1 | grep -v Warn
(cd $OUT && tar czf bigsteps_graphs.tgz bigsteps_graphs && rm -rf bigsteps_graphs)
