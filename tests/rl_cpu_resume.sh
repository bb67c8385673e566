#!/bin/sh
# Crash and resume on the CPU device: a 6-step run that checkpoints every 2 steps is
# killed with SIGKILL (every process of the job, mpirun included) once its first
# checkpoint is complete, then run again with --resume to the end. The resumed
# segment must pick up at the newest complete checkpoint and neither skip nor
# repeat a prompt: every prompt id is one GRPO group, trained before the checkpoint
# (its state.h5 /trained) or trained, buffered or in flight in the resumed file. The
# checkpoint's scheduler tree is damaged before the resume: it is optional state, so
# the resume goes on with a warning and an empty tree.
. "$(dirname "$0")/mpi_common.sh"
. "$(dirname "$0")/rl_common.sh"
out=$(scratch rl-resume)
cfg="$out/run.cfg" # every process of the job has this path on its command line
ckpt="$out/ckpt"
# 1 training rank and 2 rollout instances with max_staleness 2: the controller
# launches (0 + 2 + 1) x 4 = 12 groups at the start, so the checkpoint after step 2
# (8 groups trained) carries at least 4 groups, buffered or in flight. (A later
# checkpoint may carry none, when weight syncs lag: then that is not checked.)
rl_config "$cfg" "$out/run.h5" 6 1 "1, 1" 2 1 "checkpoint_interval = 2; checkpoint_dir = \"$ckpt\";"

$MPIRUN -np 4 "$LIBRA" "$cfg" > "$out/first.stdout" 2> "$out/first.stderr" &
job=$!
n=0
while [ ! -e "$ckpt/step-00000002/COMPLETE" ]; do
    if ! kill -0 $job 2> /dev/null; then
        cat "$out/first.stdout" "$out/first.stderr"
        fail "the first run ended before its first checkpoint"
    fi
    n=$((n + 1))
    # a safety net against a hung job (as in rl_job), not a speed requirement
    [ $n -le $((RL_HANG_S * 10)) ] \
        || { kill_job "$cfg"; fail "no complete checkpoint step 2 after $RL_HANG_S s"; }
    sleep 0.1
done
kill_job "$cfg"
wait $job 2> /dev/null
echo "killed the first run after $(ls "$ckpt" | tr '\n' ' ')"

# The checkpoint --resume will use: the newest with its completion mark. Its state
# is copied now, since the resumed run's own checkpoints retire old ones.
used=""
for d in "$ckpt"/step-*; do
    [ -e "$d/COMPLETE" ] && used="$d"
done
[ -n "$used" ] || fail "no complete checkpoint in $ckpt"
cp "$used/state.h5" "$out/state.h5" || fail "cannot copy $used/state.h5"
step=$(basename "$used" | sed 's/^step-0*//')

# The scheduler's prefix tree is optional state: a damaged (here: truncated) one is left out with a
# warning (C-MLFQ starts with an empty tree), the resume goes on.
[ -f "$used/tree.h5" ] || fail "the checkpoint has no scheduler tree"
head -c 700 "$used/tree.h5" > "$out/tree-cut.h5" && mv "$out/tree-cut.h5" "$used/tree.h5"
rl_job 4 "$cfg" "$out/second" --resume
grep "resuming from checkpoint" "$out/second.stdout"
grep -q "scheduler tree does not load .*C-MLFQ starts with an empty prefix tree" \
    "$out/second.stderr" || { cat "$out/second.stderr"; fail "the damaged tree was not reported"; }
resumed="$out/run.resumed-$step.h5"
[ -f "$resumed" ] || { ls "$out"; fail "resumed metrics file $resumed missing"; }
carry=""
[ "$step" = 2 ] && carry="--expect-carry"
"$CHECK_RL" --resume-check "$out/state.h5" "$resumed" $carry --killed "$out/run.h5" \
    || fail "check_rl"
[ -n "${KEEP:-}" ] || rm -rf "$out"
