#!/usr/bin/env bash
# Regenerate every committed simulator report. Each experiment is a scenario file, reports/sim/scenarios/NAME.yaml:
# its first line says what it tests, and it holds only what differs from the defaults. `run NAME TRACE...` below
# simulates it on each trace, for the seed of the loop, into reports/sim/NAME-TRACE-s<seed>.json and its .meta.json
# (which names the scenario file and records the effective scenario). 200 nodes x 8 GPUs, 3 days. Why 3 days, not a
# week: with gangs and short-window admission a week of six policies took > 15 min per run on the shared 2-core dev
# machine (about 10 min of CPU), too long for 3 seeds x 2 traces; 3 days take ~4 min of CPU each.
#
# Knobs (environment):
#   SEEDS="0"              the seeds (default "0 1 2"); WIDE_SEEDS those of elastic-wide, elastic-narrow,
#                          elastic-join-narrow and yield (default "0")
#   DAYS=7                 simulated days (default 3)
#   TRACES="helios"        only the runs on these traces (default "alibaba helios"; the pool runs are Helios's)
#   EXTRAS=0               only the days-* runs (not goodput90, pinned, before)
#   ELASTIC=1              only the elastic-width runs, summarised by bench/sim_seeds.py --elastic into
#                          reports/sim/elastic_summary.md
#   POOL=1                 only the pool-window runs (Helios; ~90 min)
#   LIVE=1                 only the live-pace runs (planned stops timed by the measured pace, or by the prediction:
#                          yieldsave{,-live} on Alibaba, poolcaphour{,-live} on Helios)
#   PREDICTOR_REPORTS=DIR  the predictor's error profile from DIR instead of reports/predictor: a scenario file of
#                          one field, predictor.reports, layered over each experiment's (--scenario twice)
#   SUMMARY=0              leave reports/sim/summary.md as it is after the headline runs
# Usage: reports/sim/regenerate.sh   (from anywhere; OFFPEAK_SHARED_DATA overrides the data root)
set -euo pipefail
cd "$(dirname "$0")/../.."
OP=${OFFPEAK:-.venv/bin/offpeak}
SEEDS=${SEEDS:-"0 1 2"}
DAYS=${DAYS:-3}
EXTRAS=${EXTRAS:-1}
TRACES=${TRACES:-"alibaba helios"}
DATA=${OFFPEAK_SHARED_DATA:-../shared/data}  # the full public data: the sample inside the package is too small
if [ ! -d "$DATA/traces" ]; then echo "no traces under $DATA: set OFFPEAK_SHARED_DATA to the data root" >&2; exit 2; fi
export OFFPEAK_SHARED_DATA=$DATA
declare -A ONLINE=([alibaba]=alibaba-genai-serving-v2026 [helios]=helios-earth-vc-2020-05)  # under <data>/traces
LAYER=()
if [ -n "${PREDICTOR_REPORTS:-}" ]; then
  layer=$(mktemp --suffix .yaml)
  trap 'rm -f "$layer"' EXIT
  printf 'predictor:\n  reports: "%s"\n' "$PREDICTOR_REPORTS" > "$layer"
  LAYER=(--scenario "$layer")
fi
log() { echo "$(date -u +%H:%M:%S) $*" >&2; }
uses() { [[ " $TRACES " == *" $1 "* ]]; }  # is trace $1 in TRACES?
# run [--plots] NAME TRACE...: scenarios/NAME.yaml on each TRACE that TRACES has, seed $s, into
# reports/sim/NAME-TRACE-s$s.json (with --plots, its plots into the folder of that name)
run() {
  local plot=0 name trace out extra
  if [ "$1" = --plots ]; then plot=1; shift; fi
  name=$1
  shift
  for trace in "$@"; do
    uses "$trace" || continue
    out=reports/sim/$name-$trace-s$s
    extra=()
    if [ "$plot" = 1 ]; then extra=(--plots "$out"); fi
    log "$name, $trace, seed $s"
    nice "$OP" simulate --scenario "reports/sim/scenarios/$name.yaml" "${LAYER[@]}" --online-trace "${ONLINE[$trace]}" \
      --days "$DAYS" --seed "$s" --report "$out.json" "${extra[@]}" --quiet
  done
}

if [ "${POOL:-0}" = 1 ]; then
  TRACES=helios
  for s in $SEEDS; do
    run pool helios
    run poolexact helios
    run poolexactyield helios
    run poollead helios
    run poolannounce helios
    run poolcap helios
    run poolcaphour helios
    run poolplan helios
    run poolcaphour90 helios
  done
  .venv/bin/python bench/sim_seeds.py reports/sim > reports/sim/summary.md
  log "done"
  exit 0
fi

if [ "${LIVE:-0}" = 1 ]; then  # live pace: planned stops timed by the measured pace vs by the prediction
  for s in $SEEDS; do
    run yieldsave alibaba
    run yieldsave-live alibaba
    run poolcaphour helios
    run poolcaphour-live helios
  done
  .venv/bin/python bench/sim_seeds.py reports/sim > reports/sim/summary.md
  log "done"
  exit 0
fi

if [ "${ELASTIC:-0}" = 1 ]; then
  for s in $SEEDS; do
    run elastic-off alibaba helios
    run elastic alibaba helios
    run elastic-join alibaba helios
  done
  for s in ${WIDE_SEEDS:-0}; do
    run elastic-wide alibaba helios
    run elastic-narrow alibaba helios
    run elastic-join-narrow alibaba helios
  done
  .venv/bin/python bench/sim_seeds.py --elastic reports/sim > reports/sim/elastic_summary.md
  log "done"
  exit 0
fi

for s in $SEEDS; do
  run --plots days alibaba helios
  if [ "$EXTRAS" != 1 ]; then continue; fi
  run goodput90 alibaba
  run pinned helios
  run before alibaba helios
  if [ "$s" = "${WIDE_SEEDS:-0}" ]; then run yield alibaba helios; fi  # planned stops without saving: one seed
done
if [ "${SUMMARY:-1}" = 1 ]; then .venv/bin/python bench/sim_seeds.py reports/sim > reports/sim/summary.md; fi
log "done"
