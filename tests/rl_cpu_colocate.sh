#!/bin/sh
# train.colocate on the CPU device (verl's sync-colocated baseline): the rollout ranks
# are the training replicas and alternate -- generate the step's rollouts, train on
# them (gradients all-reduced over the replicas), take the trained weights into their
# own rollout model by a local sync, generate the next step's. Runs:
#   A  4 ranks: the controller and 3 TP-1 rollout instances that are also the 3
#      training replicas (plan.n_train = 3), on-policy (max_staleness 0);
#   B  the same data on the normal split of the same 4 ranks (1 training rank, 2
#      rollout instances), max_staleness 0;
#   C  5 ranks: 2 TP-2 instances that are 2 training replicas of TP 2;
#   E  the emulated device under mpirun (5 ranks, TP [2, 1, 1]) and libra-sim on it.
# A and C must complete and lose nothing (check_run), keep their replicas identical
# and staleness 0 on every step, show that the rollout ranks and no other rank trained
# (check_rl --colocated: /steps, /plans and /spans), and learn (held-out accuracy
# rises). Colocation changes where the work runs, not the algorithm: sampling is keyed
# by (seed, prompt, sample, position) and the gradient is normalised by the whole
# batch's tokens, so A and C agree with B step by step (check_rl --compare: rollout
# figures and eval exactly, training figures within 1e-4) and their final models hold
# B's parameters. E must complete both ways (check_run).
. "$(dirname "$0")/mpi_common.sh"
. "$(dirname "$0")/rl_common.sh"
out=$(scratch rl-colocate)

# cpu NAME N_TRAIN ROLLOUT_TP TRAIN_KEYS [PLAN_KEYS]: rl_config's run of 6 steps,
# on-policy, checkpointed at the end
cpu() {
    RL_TRAIN_EXTRA=$4
    RL_PLAN_EXTRA=${5:-}
    rl_config "$out/$1.cfg" "$out/$1.h5" 6 "$2" "$3" 0 1 \
        "checkpoint_interval = 6; checkpoint_dir = \"$out/ckpt-$1\";"
}
cpu a 3 "1, 1, 1" "colocate = 1;"
cpu b 1 "1, 1" ""
cpu c 4 "2, 2" "colocate = 1;" "train_tp = 2;"
rl_job 4 "$out/a.cfg" "$out/a"
tail -n 4 "$out/a.stdout"
rl_job 4 "$out/b.cfg" "$out/b"
rl_job 5 "$out/c.cfg" "$out/c"
for run in a c; do
    "$CHECK_RUN" "$out/$run.h5" --min-steps 6 || fail "check_run $run"
    "$CHECK_RL" "$out/$run.h5" --max-staleness 0 --colocated --accuracy-rises \
        || fail "check_rl $run"
    "$CHECK_RL" --compare "$out/b.h5" "$out/$run.h5" || fail "check_rl --compare b $run"
    "$CHECK_RL" --compare-models "$out/ckpt-b/step-00000006/model.h5" \
        "$out/ckpt-$run/step-00000006/model.h5" || fail "check_rl --compare-models b $run"
done

cat > "$out/e.cfg" <<CFG
run = { name = "emu-colocate"; steps = 6; seed = 7; log_level = "warn"; progress_interval_s = 100.0; };
device = { type = "emu"; hardware = "hardware/a800.cfg"; time_scale = 300.0; };
model = { profile = "models/qwen3-4b.cfg"; };
rollout = { n_samples = 2; max_turns = 6; max_tokens_per_turn = 2048; max_tokens = 12288; };
train = { batch_size = 8; max_staleness = 0; sync_interval = 1; colocate = 1; };
plan = { n_train = 4; rollout_tp = [2, 1, 1]; };
workload = { preset = "workloads/r2e-gym.cfg"; };
output = { file = "$out/e.h5"; };
CFG
rl_job 5 "$out/e.cfg" "$out/e"
"$CHECK_RUN" "$out/e.h5" --min-steps 6 || fail "check_run e (MPI)"
"$top_builddir/src/libra-sim" "$out/e.cfg" --np 5 --out "$out/e-sim.h5" > "$out/e-sim.log" 2>&1 \
    || { tail -n 20 "$out/e-sim.log"; fail "libra-sim on e"; }
"$CHECK_RUN" "$out/e-sim.h5" --min-steps 6 || fail "check_run e (libra-sim)"
[ -n "${KEEP:-}" ] || rm -rf "$out"
