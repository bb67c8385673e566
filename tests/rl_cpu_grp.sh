#!/bin/sh
# The global resource planner and the elastic hybrid pool on the CPU device: real calc
# runs of 16 steps on 6 ranks with plan.mode = "grp" and the pool on. The planner
# plans with this host's measured cost model (device_info.cm), calibrates on the
# measured step times and re-plans; batches of 96 trajectories make training the
# heavier side.
#   planner  the start-up profile of calc trajectories (workloads/calc.cfg); the
#            planner must apply at least one plan of its own ("planner" event, a
#            grp: /plans row) -- it moves ranks between roles and TP layouts. It may
#            choose training replicas of TP 1, 2 or 4 (plan.max_train_tp = 4; on this
#            host's rates it keeps one-rank ones: two of them train faster than one
#            TP-2 replica).
#   pool     the start-up profile over-states the rollouts (the default R2E-like
#            preset), so the preflight plan is rollout-heavy, and the planner keeps it
#            (min_gain_ratio 1: a new plan would have to halve the step): the pool
#            alone rebalances, lending rollout ranks to training while training is
#            the bottleneck. The file must show a re-split by the pool and a lent rank
#            that joined. Whether rollout then becomes the bottleneck (and the pool
#            takes ranks back) depends on this machine: 6 ranks share 2 cores, so a
#            lent replica adds no compute and training usually stays the bottleneck --
#            a release is correct only when the measurements call for one. The
#            release decision is tested in test_plan_policy, the way back of a lent
#            rank in rl_cpu_hybrid.sh (B), a pool release on time-out in
#            mpi_planner.sh.
# Both: one /planner row per step, nothing lost (check_run), identical replicas
# within the staleness bound (check_rl).
. "$(dirname "$0")/mpi_common.sh"
. "$(dirname "$0")/rl_common.sh"
out=$(scratch rl-grp)
for run in planner pool; do
    if [ $run = planner ]; then
        plan='max_train_tp = 4; max_rollout_tp = 2;'
        workload='workload = { preset = "workloads/calc.cfg"; };'
    else
        plan='max_train_tp = 1; max_rollout_tp = 1; min_gain_ratio = 1.0;'
        workload=''
    fi
    cat > "$out/$run.cfg" <<CFG
run = { name = "rl-grp"; steps = 16; seed = 7; log_level = "info"; progress_interval_s = 5.0; };
device = { type = "cpu"; };
model = { checkpoint = "$RL_MODEL"; };
rollout = { n_samples = 8; max_turns = 4; max_tokens_per_turn = 48; max_tokens = 512; };
train = { batch_size = 96; max_staleness = 1; sync_interval = 1; lr = 5e-5; };
plan = { mode = "grp"; max_train_pp = 1; pool = 1; $plan };
$workload
env = { name = "calc"; };
eval = { size = 16; interval = 0; };
output = { file = "$out/$run.h5"; };
CFG
    rl_job 6 "$out/$run.cfg" "$out/$run"
    grep '^\[rank 0\]' "$out/$run.stdout" | grep -v debug
    "$CHECK_RL" "$out/$run.h5" || fail "check_rl $run"
done
"$CHECK_RUN" "$out/planner.h5" --min-steps 16 --planner --min-replans 1 --expect-event planner \
    || fail "check_run planner"
# The pool decides on measured busy fractions of this (shared, noisy) machine's ranks:
# when it has not lent within the 16 steps, the run is measured once more; a pool that
# never lends fails both times.
pool_ok() {
    "$CHECK_RUN" "$1" --min-steps 16 --planner --min-replans 1 --expect-event pool_ready
}
if ! pool_ok "$out/pool.h5"; then
    echo "pool: no lent rank joined in 16 steps: measuring once more"
    sed -i "s|$out/pool.h5|$out/pool2.h5|" "$out/pool.cfg"
    rl_job 6 "$out/pool.cfg" "$out/pool2"
    "$CHECK_RL" "$out/pool2.h5" || fail "check_rl pool (second run)"
    pool_ok "$out/pool2.h5" || fail "check_run pool"
fi
[ -n "${KEEP:-}" ] || rm -rf "$out"
