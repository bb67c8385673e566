#!/bin/sh
# Real RL on a heterogeneous CPU layout: 5 ranks (controller, 1 training rank, a TP-2
# and a TP-1 rollout instance) with C-MLFQ routing between a "short" TP-1 bucket and
# a "long" TP-2 bucket. Every first turn starts in the short bucket, which is 8
# tokens: a trajectory that calls a tool has outgrown it, and whether it moves to the
# TP-2 instance is the router's decision with the device's measured rates (the
# decode time it saves on the crowded TP-1 instance against re-prefilling its context
# on the TP-2 one). Nothing may be lost (check_run), the replicas agree and staleness
# holds (check_rl), at least one move between buckets is in /migrations, and the
# held-out greedy accuracy rises.
. "$(dirname "$0")/mpi_common.sh"
. "$(dirname "$0")/rl_common.sh"
out=$(scratch rl-tp)
cat > "$out/run.cfg" <<CFG
run = { name = "rl-tp"; steps = 8; seed = 7; log_level = "warn"; progress_interval_s = 5.0; };
device = { type = "cpu"; };
model = { checkpoint = "$RL_MODEL"; };
rollout = { n_samples = 4; max_turns = 6; max_tokens_per_turn = 48; max_tokens = 512; };
train = { batch_size = 16; max_staleness = 1; sync_interval = 1; lr = 5e-5; };
plan = { n_train = 1; rollout_tp = [2, 1]; };
sched = {
  type = "cmlfq";
  buckets = ( { name = "short"; tp = [1]; max_tokens = 8; },
              { name = "long"; tp = [2]; max_tokens = 512; } );
  default_bucket = "short";
  payload_small = 8;
  payload_large = 32;
};
env = { name = "calc"; calc_min_steps = 2; calc_max_steps = 4; };
eval = { size = 16; interval = 0; };
output = { file = "$out/run.h5"; };
CFG
rl_job 5 "$out/run.cfg" "$out/run"
tail -n 4 "$out/run.stdout"
"$CHECK_RUN" "$out/run.h5" --min-steps 8 || fail "check_run"
"$CHECK_RL" "$out/run.h5" --min-migrations 1 --accuracy-rises || fail "check_rl"
[ -n "${KEEP:-}" ] || rm -rf "$out"
