#!/bin/sh
# A hybrid (lent) replica on the CPU device gives the parameters training without it
# gives. Two runs of the same data -- max_staleness 0 and a weight sync after every
# step, so each step trains exactly the groups launched at its version and sampling is
# keyed by (seed, trajectory, position): which instance or replica does the work does
# not change a token --
#   A  1 training rank and 3 rollout instances throughout;
#   B  the same, but in the middle epoch one rollout rank is lent to training: it
#      joins without stopping the core (a snapshot of the root's weights and AdamW
#      moments, then the totals of the steps it missed), trains its token share on
#      the hybrid lane, and goes back to rollout.
# B must have trained some steps with the lent replica, and after 12 steps the two
# final models must hold the same parameters within 1e-4 relative (the gradient is
# normalised by the whole batch's tokens, so splitting a batch over more replicas
# only reorders sums); their step figures agree (check_rl --compare).
. "$(dirname "$0")/mpi_common.sh"
. "$(dirname "$0")/rl_common.sh"
out=$(scratch rl-hybrid)
for run in a b; do
    if [ $run = a ]; then
        sched='{ n_train = 1; rollout_tp = [1, 1, 1]; }'
    else
        sched='{ n_train = 1; rollout_tp = [1, 1, 1]; }, { n_train = 1; n_hybrid = 1; rollout_tp = [1, 1]; }'
    fi
    cat > "$out/$run.cfg" <<CFG
run = { name = "rl-hybrid"; steps = 12; seed = 7; log_level = "warn"; progress_interval_s = 5.0;
        checkpoint_interval = 12; checkpoint_dir = "$out/ckpt-$run"; };
device = { type = "cpu"; };
model = { checkpoint = "$RL_MODEL"; };
rollout = { n_samples = 4; max_turns = 4; max_tokens_per_turn = 48; max_tokens = 512; };
train = { batch_size = 16; max_staleness = 0; sync_interval = 1; lr = 5e-5; };
plan = { mode = "schedule"; interval = 4; schedule = ( $sched ); };
env = { name = "calc"; };
eval = { size = 16; interval = 0; };
output = { file = "$out/$run.h5"; };
CFG
    rl_job 5 "$out/$run.cfg" "$out/$run"
done
"$CHECK_RUN" "$out/b.h5" --min-steps 12 || fail "check_run"
"$CHECK_RL" "$out/b.h5" --min-hybrid-steps 1 || fail "check_rl: the lent replica"
"$CHECK_RL" --compare "$out/a.h5" "$out/b.h5" || fail "check_rl --compare"
"$CHECK_RL" --compare-models "$out/ckpt-a/step-00000012/model.h5" \
    "$out/ckpt-b/step-00000012/model.h5" || fail "check_rl --compare-models"
[ -n "${KEEP:-}" ] || rm -rf "$out"
