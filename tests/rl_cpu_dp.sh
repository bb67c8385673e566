#!/bin/sh
# Data-parallel RL training on the CPU device with staleness: 4 ranks (controller,
# 2 training replicas, 1 rollout instance), max_staleness 2 and weights synced every
# 2 steps, so several batches' groups are in flight at once and trajectories are
# trained on up to 2 versions after they started. After every step the replicas'
# parameter hashes must agree (params_identical), and no trajectory may be staler
# than the bound: staleness_max <= 2 per step and, per trained trajectory,
# (step_consumed - 1) - version_start <= 2 (the controller trains at version =
# steps done = step_consumed - 1).
. "$(dirname "$0")/mpi_common.sh"
. "$(dirname "$0")/rl_common.sh"
out=$(scratch rl-dp)
rl_config "$out/run.cfg" "$out/run.h5" 5 2 1 2 2
rl_job 4 "$out/run.cfg" "$out/run"
tail -n 3 "$out/run.stdout"
"$CHECK_RUN" "$out/run.h5" --min-steps 5 || fail "check_run"
"$CHECK_RL" "$out/run.h5" --max-staleness 2 || fail "check_rl"
[ -n "${KEEP:-}" ] || rm -rf "$out"
