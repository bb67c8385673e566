#!/bin/sh
# The global resource planner and the elastic hybrid pool on the CPU device: a real
# calc run of 20 steps on 6 ranks with plan.mode = "grp" and the pool on. The planner
# plans with this host's measured cost model (device_info.cm) from a start-up profile
# of calc trajectories (workloads/calc.cfg), calibrates on the measured step times and
# re-plans; batches of 96 trajectories make training the heavier side, so the pool
# lends a rollout instance to training and takes it back when rollout becomes the
# bottleneck. The metrics file must show at least two re-splits chosen by the planner
# or the pool, a lent rank that joined and was released, one /planner row per step,
# nothing lost (check_run), and identical replicas within the staleness bound
# (check_rl).
. "$(dirname "$0")/mpi_common.sh"
. "$(dirname "$0")/rl_common.sh"
out=$(scratch rl-grp)
cat > "$out/run.cfg" <<CFG
run = { name = "rl-grp"; steps = 20; seed = 7; log_level = "info"; progress_interval_s = 5.0; };
device = { type = "cpu"; };
model = { checkpoint = "$RL_MODEL"; };
rollout = { n_samples = 8; max_turns = 4; max_tokens_per_turn = 48; max_tokens = 512; };
train = { batch_size = 96; max_staleness = 1; sync_interval = 1; lr = 5e-5; };
plan = { mode = "grp"; max_train_tp = 1; max_train_pp = 1; max_rollout_tp = 2; pool = 1; };
workload = { preset = "workloads/calc.cfg"; };
env = { name = "calc"; };
eval = { size = 16; interval = 0; };
output = { file = "$out/run.h5"; };
CFG
rl_job 6 "$out/run.cfg" "$out/run"
grep '^\[rank 0\]' "$out/run.stdout" | grep -v debug
"$CHECK_RUN" "$out/run.h5" --min-steps 20 --planner --min-replans 2 --expect-event pool_ready \
    --expect-event pool_release || fail "check_run"
"$CHECK_RL" "$out/run.h5" || fail "check_rl"
[ -n "${KEEP:-}" ] || rm -rf "$out"
