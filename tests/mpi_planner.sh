#!/bin/sh
# The global resource planner and the elastic hybrid pool in a 17-rank emulated job
# (plan.mode = "grp"): the preflight plan, re-plans, lent replicas joining training
# without touching the core training communicator; nothing may be lost. Then the
# same job with joins that cannot finish in time: every join is rolled back to
# rollout, and still nothing is lost.
. "$(dirname "$0")/mpi_common.sh"
out=$(scratch mpiplanner)
grp_config() { # FILE OUTFILE [extra plan keys]
    cat > "$1" <<CFG
run = { name = "mpi-planner"; steps = 18; seed = 7; progress_interval_s = 100.0; };
device = { type = "emu"; hardware = "hardware/a800.cfg"; time_scale = 300.0; };
model = { profile = "models/qwen3-4b.cfg"; };
rollout = { n_samples = 4; max_turns = 1; max_tokens_per_turn = 128; max_tokens = 1024; };
train = { batch_size = 64; max_staleness = 1; sync_interval = 1; };
plan = { mode = "grp"; interval = 3; min_history = 16; history = 64; min_rollout = 12;
         max_train_tp = 1; max_rollout_tp = 2; pool_min_rollout = 2; ${3:-} };
workload = { preset = "workloads/dapo-math.cfg"; };
output = { file = "$2"; };
CFG
}
# Short math rollouts, big batches to train, and a planner that must keep >= 12 of
# the 16 GPUs for rollout: training is the bottleneck and the pool lends rollout
# instances to it, a few replicas at a time (re-splits that keep the core group).
grp_config "$out/run.cfg" "$out/run.h5"
$MPIRUN -np 17 "$LIBRA" "$out/run.cfg" > "$out/stdout" 2> "$out/stderr" \
  || { cat "$out/stdout" "$out/stderr"; fail "17-rank planner run exited non-zero"; }
grep -E "^\[rank 0\] (epoch|pool:)" "$out/stdout" | head -n 12
"$CHECK_RUN" "$out/run.h5" --min-steps 18 --planner --min-replans 2 \
  --expect-event pool_ready || fail "check_run (planner + pool)"
grep -q "core training communicator kept" "$out/stdout" || fail "no join kept the core communicator"

# Joins time out (0.001 emulated s, far below the weight fetch): rolled back.
grp_config "$out/timeout.cfg" "$out/timeout.h5" "pool_join_timeout_s = 0.001;"
$MPIRUN -np 17 "$LIBRA" "$out/timeout.cfg" > "$out/stdout2" 2> "$out/stderr2" \
  || { cat "$out/stdout2" "$out/stderr2"; fail "17-rank join-timeout run exited non-zero"; }
"$CHECK_RUN" "$out/timeout.h5" --min-steps 18 --planner --expect-event pool_join_timeout \
  || fail "check_run (join timeouts)"
[ -n "${KEEP:-}" ] || rm -rf "$out"
