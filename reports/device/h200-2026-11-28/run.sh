#!/bin/bash
# Device checks for one short lease: agent NVML path, `offpeak collect --plan new-gpu`, real-model steps.
set +e
R=$(pwd)
export PYTHONPATH=$R:$R/core:$R/graph:$R/predictor:$R/operator:$R/extender:$R/agent:$R/simulator:$R/dashboard
export PYTHONUNBUFFERED=1 OFFPEAK_CACHE=/tmp/opc OFFPEAK_GRAPH_CACHE=/tmp/opc/graphs
L=$OUT/log.txt
T0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $L; }
{ nvidia-smi; python3 -c "import torch,torchvision,transformers,pynvml;print(torch.__version__,torchvision.__version__,transformers.__version__,torch.cuda.get_device_name())"; } >> $L 2>&1
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.memory,power.limit,memory.total --format=csv > $OUT/h200_smi.csv
nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used,clocks.sm,power.draw --format=csv -l 2 > $OUT/smi_log.csv 2>&1 &
SMI=$!
python3 -m offpeak agent --port 9400 --interval 1 --node-name h200 --log-level INFO >> $L 2>&1 &
AG=$!
sleep 3
python3 .devrun/agent_probe.py $OUT/agent_samples.jsonl /tmp/stop_probe >> $L 2>&1 &
PR=$!
stamp "collect start"
time python3 -m offpeak collect --plan new-gpu --device cuda --db $OUT/h200_collect.sqlite >> $L 2>&1
stamp "collect end rc=$?"
(cd /tmp/opc && tar czf $OUT/collected_graphs.tgz graphs) 2>>$L
stamp "measure start"
B=$(( 400 - ($(date +%s) - T0) )); [ $B -lt 60 ] && B=60
MEASURE_BUDGET_S=$B python3 .devrun/measure_fast.py $OUT/h200_models.jsonl >> $L 2>&1
stamp "measure end rc=$?"
touch /tmp/stop_probe; sleep 3
kill $AG $SMI $PR 2>/dev/null
stamp "done"
