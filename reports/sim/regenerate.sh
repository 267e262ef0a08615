#!/usr/bin/env bash
# Regenerate every committed simulator report and plot (about 3 minutes each on the 2-core dev machine).
# Usage: reports/sim/regenerate.sh   (from the repository root; OFFPEAK_SHARED_DATA overrides the data root)
set -euo pipefail
cd "$(dirname "$0")/../.."
OP=${OFFPEAK:-.venv/bin/offpeak}
DATA=${OFFPEAK_SHARED_DATA:-../shared/data}
# headline: Alibaba GenAI online demand, ITP jobs, extender's seasonal forecaster
nice "$OP" simulate --report reports/sim/week-alibaba.json --plots reports/sim/week-alibaba --quiet
# same week with a perfect forecaster: separates forecast error from runtime-prediction error
nice "$OP" simulate --forecast exact --report reports/sim/week-alibaba-exact.json --plots reports/sim/week-alibaba-exact --quiet
# Helios per-VC occupancy as the online side (long, diurnal idle windows)
nice "$OP" simulate --online-trace "$DATA/traces/helios-earth-vc-2020-05" \
  --report reports/sim/week-helios.json --plots reports/sim/week-helios --quiet
# what-if: checkpoint-aware admission (offpeak-ckpt), next to backfill and offpeak
nice "$OP" simulate --policies backfill,offpeak,offpeak-ckpt \
  --report reports/sim/week-alibaba-ckpt.json --plots reports/sim/week-alibaba-ckpt --quiet
