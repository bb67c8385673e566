#!/bin/sh
# A training step whose loss or gradient is not finite is never applied
# (train.on_nonfinite). A 3-rank CPU run that checkpoints every 2 steps gets a NaN in
# its gradient at step 3 (LIBRA_TEST_NONFINITE_STEP, the trainer's fault injection):
#   stop (the default)  no step after it is started; the job exits 1 naming the step,
#                       the replica's rank and the tensor; its metrics file reads
#                       "failed" with a "nonfinite" event and is otherwise whole
#                       (check_run); the last checkpoint is step 2's and loads (its
#                       tensors finite, their checksums good), and no later one exists;
#   skip                the run completes all its steps, the bad step counted in the
#                       summary and the nonfinite_skipped attribute, nothing lost.
. "$(dirname "$0")/mpi_common.sh"
. "$(dirname "$0")/rl_common.sh"
out=$(scratch rl-nonfinite)
ckpt="$out/ckpt"
rl_config "$out/stop.cfg" "$out/stop.h5" 6 1 1 1 1 "checkpoint_interval = 2; checkpoint_dir = \"$ckpt\";"
export LIBRA_TEST_NONFINITE_STEP=3
rc=0
timeout -k 10 $RL_HANG_S $MPIRUN -np 3 "$LIBRA" "$out/stop.cfg" > "$out/stop.stdout" \
    2> "$out/stop.stderr" || rc=$?
[ $rc = 1 ] || { tail -n 20 "$out/stop.stdout"; cat "$out/stop.stderr"; fail "exit status $rc with a NaN gradient (1 expected)"; }
grep -q "step 3: loss .*, gradient norm nan (training replica rooted at rank [0-9]*; first non-finite gradient: model.layers.[0-9]*.mlp.down_proj.weight): the update was not applied; the run stops" \
    "$out/stop.stderr" || { cat "$out/stop.stderr"; fail "no message naming the step, the rank and the tensor"; }
"$CHECK_RUN" "$out/stop.h5" --expect-status failed --min-steps 3 --expect-event nonfinite \
    || fail "check_run of the stopped run"
[ -e "$ckpt/step-00000002/COMPLETE" ] || fail "no complete checkpoint of step 2"
[ "$(ls "$ckpt" | grep -c '^step-')" = 1 ] || { ls "$ckpt"; fail "a checkpoint after step 2"; }
printf '1 2 3 4 5 6 7 8\n' > "$out/toks"
"$LIBRA" score "$ckpt/step-00000002/model.h5" "$out/toks" > /dev/null \
    || fail "the last checkpoint's model does not load"

sed -e 's|lr = 5e-5;|lr = 5e-5; on_nonfinite = "skip";|' -e "s|$out/stop.h5|$out/skip.h5|" \
    -e "s|$ckpt|$out/ckpt-skip|" "$out/stop.cfg" > "$out/skip.cfg"
rl_job 3 "$out/skip.cfg" "$out/skip"
grep -q "batch skipped (train.on_nonfinite = \"skip\", 1 so far)" "$out/skip.stderr" \
    || { cat "$out/skip.stderr"; fail "the skipped step is not reported"; }
grep -q "libra: 1 steps skipped: loss or gradient not finite" "$out/skip.stdout" \
    || fail "the summary does not count the skipped step"
"$CHECK_RUN" "$out/skip.h5" --min-steps 6 --expect-event nonfinite || fail "check_run of the skip run"
"$CHECK_RL" "$out/skip.h5" || fail "check_rl of the skip run"
[ -n "${KEEP:-}" ] || rm -rf "$out"
