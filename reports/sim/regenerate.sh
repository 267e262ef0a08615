#!/usr/bin/env bash
# Regenerate every committed simulator report and plot: every policy on the same 3 days (DAYS) of Alibaba and
# Helios online demand, 3 seeds, 200 nodes x 8 GPUs. Why 3 days, not a week: with gangs and short-window
# admission a week of six policies took > 15 min per run on the shared 2-core dev machine (about 10 min of CPU),
# too long for 3 seeds x 2 traces; 3 days take ~4 min of CPU each (the whole script ~30 min with two in parallel).
# DAYS=7 for the full week. SEEDS="0" for one seed. EXTRAS=0 skips the goodput90-alibaba (the goodput rule at
# --min-efficiency 0.9), pinned-helios and before runs.
# TRACES="helios" (or "alibaba") runs that trace only (headline, pinned and before runs; with ELASTIC=1 the elastic
# ones; POOL=1 is Helios only anyway).
# PREDICTOR_REPORTS=DIR takes the predictor's error profile from DIR instead of reports/predictor.
# ELASTIC=1 runs only the elastic-width comparison instead (backfill, offpeak, offpeak-p90; elastic off, --elastic 0.5,
# --elastic 0.5 --elastic-join: reports/sim/elastic{-off,,-join}-<trace>-s<seed>.json; WIDE_SEEDS (0): --elastic 0.5
# --elastic-from-gpus 9, elastic-wide-<trace>-s<seed>.json), summarised by
# bench/sim_seeds.py --elastic into reports/sim/elastic_summary.md).
# POOL=1 runs only the pool-window comparison instead (Helios; backfill, offpeak, offpeak-p90 with --pool-windows:
# reports/sim/pool-helios-s<seed>.json), and the same with a perfect pool forecast (--pool-forecast exact:
# reports/sim/poolexact-helios-s<seed>.json), and with yielding at a checkpoint before that forecast's window ends
# (--yield: reports/sim/poolexactyield-helios-s<seed>.json), and the rise forecast with each VC's true online total
# known 35 minutes ahead (a checkpoint interval and the yield's margin, rounded up to a forecast step) and yielding
# (--pool-lead-minutes 35 --yield: reports/sim/poollead-helios-s<seed>.json), and the rise forecast with each VC's
# true online total 35 minutes ahead as a floor under it (what the extender's announced demand does) and yielding,
# jobs saving as they stop as a checkpoint claim's do (--pool-announce-minutes 35 --yield --save-on-stop 60, the
# default gracePeriodSeconds: reports/sim/poolannounce-helios-s<seed>.json), and the same with that total also a
# ceiling over the forecast within the 35 minutes, as a trusted OnlineDemand's poolGpusAtMost is in the extender
# (--pool-announce-ceiling: reports/sim/poolcap-helios-s<seed>.json), and with that ceiling stated once per clock
# hour as the hour's busiest minute, as a scaler's replica limit would be (--pool-ceiling-block-minutes 60:
# reports/sim/poolcaphour-helios-s<seed>.json), and with the floor stated per clock hour too, so each hour is announced
# at its busiest minute as a replica plan would (--pool-floor-block-minutes 60: reports/sim/poolplan-helios-s<seed>.json),
# and poolcaphour with the goodput rule at --min-efficiency 0.9 (backfill and
# offpeak only: reports/sim/poolcaphour90-helios-s<seed>.json), summarised with the others by bench/sim_seeds.py into
# summary.md.
# Usage: reports/sim/regenerate.sh   (from the repository root; OFFPEAK_SHARED_DATA overrides the data root)
set -euo pipefail
cd "$(dirname "$0")/../.."
OP=${OFFPEAK:-.venv/bin/offpeak}
DATA=${OFFPEAK_SHARED_DATA:-../shared/data}
SEEDS=${SEEDS:-"0 1 2"}
DAYS=${DAYS:-3}
POLICIES=default,backfill,user-estimate,offpeak,offpeak-p90,oracle
HELIOS="$DATA/traces/helios-earth-vc-2020-05"
EXTRAS=${EXTRAS:-1}
TRACES=${TRACES:-"alibaba helios"}
PRED=()
if [ -n "${PREDICTOR_REPORTS:-}" ]; then PRED=(--predictor-reports "$PREDICTOR_REPORTS"); fi
log() { echo "$(date -u +%H:%M:%S) $*" >&2; }
uses() { [[ " $TRACES " == *" $1 "* ]]; }  # is trace $1 in TRACES?
# on TRACE NAME ARGS...: when TRACES has TRACE, simulate seed $s on its online demand (alibaba: the default trace)
# with ARGS, into reports/sim/NAME-TRACE-s$s.json
on() {
  local trace=$1 name=$2 online=()
  shift 2
  uses "$trace" || return 0
  if [ "$trace" = helios ]; then online=(--online-trace "$HELIOS"); fi
  nice "$OP" simulate --days "$DAYS" --seed "$s" "$@" "${PRED[@]}" "${online[@]}" \
    --report "reports/sim/$name-$trace-s$s.json" --quiet
}
if [ "${POOL:-0}" = 1 ]; then
  TRACES=helios  # the pool runs are Helios's, whatever TRACES says
  pool=(--policies backfill,offpeak,offpeak-p90 --pool-windows)
  for s in $SEEDS; do
    log "pool windows, helios seed $s"
    on helios pool "${pool[@]}"
    log "pool windows, exact pool forecast, helios seed $s"
    on helios poolexact "${pool[@]}" --pool-forecast exact
    log "pool windows, exact pool forecast, yielding, helios seed $s"
    on helios poolexactyield "${pool[@]}" --pool-forecast exact --yield
    log "pool windows, online total known 35 min ahead, yielding, helios seed $s"
    on helios poollead "${pool[@]}" --pool-lead-minutes 35 --yield
    log "pool windows, online total announced 35 min ahead as a floor, yielding, helios seed $s"
    on helios poolannounce "${pool[@]}" --pool-announce-minutes 35 --yield --save-on-stop 60
    log "pool windows, online total announced 35 min ahead as a floor and a ceiling, yielding, helios seed $s"
    on helios poolcap "${pool[@]}" --pool-announce-minutes 35 --pool-announce-ceiling --yield --save-on-stop 60
    log "pool windows, the same with the ceiling stated once per clock hour, helios seed $s"
    on helios poolcaphour "${pool[@]}" --pool-announce-minutes 35 --pool-announce-ceiling --pool-ceiling-block-minutes 60 \
      --yield --save-on-stop 60
    log "pool windows, a replica plan per clock hour (floor and ceiling the hour's busiest minute), helios seed $s"
    on helios poolplan "${pool[@]}" --pool-announce-minutes 35 --pool-announce-ceiling --pool-ceiling-block-minutes 60 \
      --pool-floor-block-minutes 60 --yield --save-on-stop 60
    log "pool windows, the same with the goodput rule at 0.9, helios seed $s"
    on helios poolcaphour90 --policies backfill,offpeak --pool-windows --pool-announce-minutes 35 --pool-announce-ceiling \
      --pool-ceiling-block-minutes 60 --yield --save-on-stop 60 --min-efficiency 0.9
  done
  .venv/bin/python bench/sim_seeds.py reports/sim > reports/sim/summary.md
  log "done"
  exit 0
fi
if [ "${ELASTIC:-0}" = 1 ]; then
  for s in $SEEDS; do
    for variant in off on join; do
      case $variant in off) tag=elastic-off; el=() ;; on) tag=elastic; el=(--elastic 0.5) ;;
                       join) tag=elastic-join; el=(--elastic 0.5 --elastic-join) ;; esac
      log "$tag seed $s"
      for trace in alibaba helios; do on "$trace" "$tag" --policies backfill,offpeak,offpeak-p90 "${el[@]}"; done
    done
  done
  for s in ${WIDE_SEEDS:-0}; do  # elastic for jobs wider than a node only (8-GPU nodes), seed 0 committed
    log "elastic-wide seed $s"
    for trace in alibaba helios; do
      on "$trace" elastic-wide --policies backfill,offpeak,offpeak-p90 --elastic 0.5 --elastic-from-gpus 9
    done
  done
  .venv/bin/python bench/sim_seeds.py --elastic reports/sim > reports/sim/elastic_summary.md
  log "done"
  exit 0
fi
for s in $SEEDS; do
  # Alibaba GenAI online demand; Helios per-VC occupancy as online pods placed by the default scheduler's rule.
  # ITP jobs (wide jobs as gangs), the extender's seasonal forecaster
  for trace in alibaba helios; do
    uses "$trace" && log "$trace seed $s"
    on "$trace" days --policies "$POLICIES" --plots "reports/sim/days-$trace-s$s"
  done
  if [ "$EXTRAS" != 1 ]; then continue; fi
  # the goodput rule with a higher threshold on Alibaba's node windows (what an operator would set to keep lost work
  # under a tenth of backfill's there: 0.8 loses 8.9-10.4 %)
  uses alibaba && log "alibaba goodput 0.9 seed $s"
  on alibaba goodput90 --policies backfill,offpeak --min-efficiency 0.9
  # ... and with each VC's online GPUs pinned to its nodes (the model before pod placement), for the before/after
  uses helios && log "helios pinned seed $s"
  on helios pinned --policies "$POLICIES" --online-placement pinned
  # the model before issue 18 (wide jobs folded onto one node, no gangs), for the before/after table
  log "before: $TRACES seed $s"
  for trace in alibaba helios; do on "$trace" before --policies backfill,offpeak-p90 --fold-wide-jobs --no-gangs; done
done
log "summary"
if [ "${SUMMARY:-1}" = 1 ]; then .venv/bin/python bench/sim_seeds.py reports/sim > reports/sim/summary.md; fi
log "done"
