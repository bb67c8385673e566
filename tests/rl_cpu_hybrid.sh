#!/bin/sh
# Re-planning on the CPU device is lossless: a hybrid (lent) replica, and plans that
# move ranks between roles and change the rollout TP layout, give the parameters a
# fixed plan gives. Three runs of the same data -- max_staleness 0 and a weight sync
# after every step, so each step trains exactly the groups launched at its version,
# and sampling is keyed by (seed, trajectory, position): which instance or replica
# does the work does not change a token --
#   A  1 training rank and 3 rollout instances throughout;
#   B  the same, but for steps 3-8 one rollout rank is lent to training (two epochs
#      with the same plan: one re-split, so its join has six steps to land on this
#      noisy machine): it joins without stopping the core (a snapshot of the root's
#      weights and AdamW moments, then the totals of the steps it missed), trains
#      its token share on the hybrid lane, and goes back to rollout;
#   C  epochs of 1 training rank + TP [1, 1, 1], then 2 training ranks + TP [2] (the
#      new training rank takes over the root's state at the re-split), then 1 + TP
#      [2, 1]: instances dissolve and hand their turns back, shards change;
#   D  the training replicas change their TP degree: 2 replicas of TP 1, then one of
#      TP 2, then one of TP 1 (the old root replica gathers the whole training state --
#      weights and AdamW moments -- and hands each new training rank its new shard);
#   E  the same through TP 4, where the model's 2 kv heads are replicated (each held
#      by 2 of the replica's 4 ranks, their gradients summed over those two): 2
#      replicas of TP 1, then one of TP 4, then one of TP 1 (6 ranks);
#   F  a plan that lends from its first step: a TP-2 replica and a lent TP-2 replica
#      throughout, whose join its partners serve before they have trained (their
#      starting state: that was refused as "a join without a trainer"; 6 ranks).
# B must have trained some steps with the lent replica, F most; after 12 steps every final
# model must hold A's parameters within 1e-4 relative (the gradient is normalised by
# the whole batch's tokens, so more replicas only reorder sums), and the step
# figures agree (check_rl --compare).
. "$(dirname "$0")/mpi_common.sh"
. "$(dirname "$0")/rl_common.sh"
out=$(scratch rl-hybrid)
for run in a b c d e f; do
    interval=4 level=warn np=5
    case $run in
    a) sched='{ n_train = 1; rollout_tp = [1, 1, 1]; }' ;;
    b) lent='{ n_train = 1; n_hybrid = 1; rollout_tp = [1, 1]; }'
       sched="{ n_train = 1; rollout_tp = [1, 1, 1]; }, $lent, $lent, { n_train = 1; rollout_tp = [1, 1, 1]; }"
       interval=3 ;;
    c) sched='{ n_train = 1; rollout_tp = [1, 1, 1]; }, { n_train = 2; rollout_tp = [2]; }, { n_train = 1; rollout_tp = [2, 1]; }' ;;
    d) sched='{ n_train = 2; rollout_tp = [1, 1]; }, { n_train = 2; train_tp = 2; rollout_tp = [1, 1]; }, { n_train = 1; rollout_tp = [1, 1, 1]; }'
       level=info ;;
    e) sched='{ n_train = 2; rollout_tp = [1, 1, 1]; }, { n_train = 4; train_tp = 4; rollout_tp = [1]; }, { n_train = 1; rollout_tp = [1, 1, 1, 1]; }'
       level=info np=6 ;;
    f) sched='{ n_train = 2; train_tp = 2; n_hybrid = 2; rollout_tp = [1]; }' np=6 ;;
    esac
    # every weight sync checked end to end (train.verify_syncs): float32 to lent
    # replicas, TP changes, run c's TP-1 rank feeding the TP-2 instance
    RL_TRAIN_EXTRA="verify_syncs = 1;" \
        RL_LOG_LEVEL=$level rl_sched_config "$out/$run.cfg" "$out/$run.h5" 12 $interval "$sched" \
        "checkpoint_interval = 12; checkpoint_dir = \"$out/ckpt-$run\";"
    rl_job $np "$out/$run.cfg" "$out/$run"
done
"$CHECK_RL" "$out/b.h5" --min-hybrid-steps 1 || fail "check_rl: the lent replica"
"$CHECK_RL" "$out/f.h5" --min-hybrid-steps 6 || fail "check_rl: the lent replica from the start"
grep -q "epoch 1: train 2 (replicas of TP 2 x PP 1)" "$out/d.stdout" ||
    fail "run d: the plan with replicas of TP 2 was not applied"
grep -q "epoch 1: train 4 (replicas of TP 4 x PP 1)" "$out/e.stdout" ||
    fail "run e: the plan with a replica of TP 4 was not applied"
for run in b c d e f; do
    "$CHECK_RUN" "$out/$run.h5" --min-steps 12 || fail "check_run $run"
    "$CHECK_RL" --compare "$out/a.h5" "$out/$run.h5" || fail "check_rl --compare a $run"
    "$CHECK_RL" --compare-models "$out/ckpt-a/step-00000012/model.h5" \
        "$out/ckpt-$run/step-00000012/model.h5" || fail "check_rl --compare-models a $run"
done
[ -n "${KEEP:-}" ] || rm -rf "$out"
