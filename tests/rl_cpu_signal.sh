#!/bin/sh
# A signal stops a run cleanly (include/libra/stop_signal.h): a CPU-device run that
# checkpoints every 2 steps gets SIGUSR1 (what Slurm's --signal=B:USR1@SECONDS sends;
# mpirun forwards it to every rank) once its first checkpoint is complete. The job
# must exit with status 3, its metrics file must read "cancelled" with a "cancel"
# event and every finished step, and the checkpoint it wrote at the stop must resume
# to a run that completes. On the way, the checkpoint directory's lock: a second job
# is refused while the first runs, the stopped job removes its lock, and a lock left
# by a process that is gone is taken over by the resume; and a resume whose config
# changes what must be kept (here train.batch_size) is refused, naming the key. The
# resume is the one a job requeued by Slurm makes by itself (SLURM_RESTART_COUNT); a
# requeued job with no checkpoint starts afresh beside the first attempt's file; a
# second resume from the same checkpoint writes its own file.
. "$(dirname "$0")/mpi_common.sh"
. "$(dirname "$0")/rl_common.sh"
out=$(scratch rl-signal)
cfg="$out/run.cfg"
ckpt="$out/ckpt"
rl_config "$cfg" "$out/run.h5" 40 1 1 2 1 "checkpoint_interval = 2; checkpoint_dir = \"$ckpt\";"

$MPIRUN -np 3 "$LIBRA" "$cfg" > "$out/first.stdout" 2> "$out/first.stderr" &
job=$!
n=0
while [ ! -e "$ckpt/step-00000002/COMPLETE" ]; do
    kill -0 $job 2> /dev/null || { cat "$out/first.stderr"; fail "the run ended before its first checkpoint"; }
    n=$((n + 1))
    [ $n -le $((RL_HANG_S * 10)) ] || { kill -9 $job; fail "no checkpoint after $RL_HANG_S s"; }
    sleep 0.1
done
# one job per checkpoint directory: a second job on the same config is refused at once
if $MPIRUN -np 3 "$LIBRA" "$cfg" > "$out/second-job.stdout" 2> "$out/second-job.stderr"; then
    fail "a second job ran in the checkpoint directory of a running one"
fi
grep -q "is in use by the job of pid" "$out/second-job.stderr" \
    || { cat "$out/second-job.stderr"; fail "the second job's refusal does not name the holder"; }
[ -e "$ckpt/LOCK" ] || fail "the running job's lock is gone"
kill -USR1 $job
n=0
while kill -0 $job 2> /dev/null; do
    n=$((n + 1))
    [ $n -le $((RL_HANG_S * 10)) ] || { kill -9 $job; fail "the run did not stop within $RL_HANG_S s of SIGUSR1"; }
    sleep 0.1
done
wait $job
rc=$?
[ $rc = 3 ] || { tail -n 20 "$out/first.stdout"; cat "$out/first.stderr"; fail "exit status $rc after SIGUSR1 (3 expected)"; }
grep -q "stop requested by signal" "$out/first.stderr" || fail "no stop message on stderr"
"$CHECK_RUN" "$out/run.h5" --expect-status cancelled --min-steps 2 --expect-event cancel \
    || fail "check_run of the cancelled run"

# the newest complete checkpoint is the stop's; resume it for one more step
last=""
for d in "$ckpt"/step-*; do [ -e "$d/COMPLETE" ] && last="$d"; done
step=$(basename "$last" | sed 's/^step-0*//')
echo "stopped after step $step ($(ls "$ckpt" | tr '\n' ' '))"
cp "$last/state.h5" "$out/state.h5" || fail "cannot copy $last/state.h5"
[ ! -e "$ckpt/LOCK" ] || fail "the stopped job left its lock behind"
# a lock left by a process that is gone (a killed job) is taken over
sleep 60 & dead=$!; kill $dead; wait $dead 2> /dev/null
printf 'host %s\npid %s\njob -\nrestart 0\n' "$(hostname)" "$dead" > "$ckpt/LOCK"
# a resume that changes what a resumed run must keep is refused, key by key
sed "s/batch_size = 16;/batch_size = 32;/" "$cfg" > "$out/changed.cfg"
if $MPIRUN -np 3 "$LIBRA" "$out/changed.cfg" --resume > "$out/changed.stdout" 2> "$out/changed.stderr"; then
    fail "a resume with another train.batch_size ran"
fi
grep -q 'train.batch_size: "16" (checkpoint) vs "32" (now)' "$out/changed.stderr" \
    || { cat "$out/changed.stderr"; fail "the refused resume does not name train.batch_size and both values"; }
# it took over the stale lock, and released it when it refused
grep -q "took over the checkpoint lock" "$out/changed.stdout" || fail "the stale lock was not taken over"
[ ! -e "$ckpt/LOCK" ] || fail "the refused resume left its lock behind"
sed -i "s/steps = 40;/steps = $((step + 1));/" "$cfg"
# the job Slurm requeues (--requeue; SLURM_RESTART_COUNT > 0) resumes by itself
(export SLURM_RESTART_COUNT=1; rl_job 3 "$cfg" "$out/second") || exit 1
grep -q "Slurm requeued this job (restart 1): resuming from the newest checkpoint" \
    "$out/second.stdout" || fail "the requeued job did not resume by itself"
grep "resuming from checkpoint" "$out/second.stdout"
# what a resume may change is applied and recorded: here run.steps
grep -q "resumed with changed settings: run.steps: \"40\" (checkpoint) vs \"$((step + 1))\" (now)" \
    "$out/second.stdout" || fail "the changed run.steps is not reported"
/usr/bin/python3 - "$out/run.resumed-$step.h5" << 'PYEOF' || fail "no config_change event naming run.steps in the resumed file"
import sys
import h5py
ev = h5py.File(sys.argv[1], "r")["events"][()]
text = lambda v: v.decode() if isinstance(v, bytes) else str(v)
code = h5py.check_enum_dtype(ev.dtype["kind"])["config_change"]
sys.exit(0 if any(e["kind"] == code and "run.steps" in text(e["detail"])
                  for e in ev) else 1)
PYEOF
# every prompt trained once across the stop (groups in flight at the stop carried over)
"$CHECK_RL" --resume-check "$out/state.h5" "$out/run.resumed-$step.h5" \
    || fail "check_rl of the resumed run"
# a second resume from a checkpoint a resume already started from (a crash before the
# next one): its own metrics file beside the first (when the resumed segment wrote a
# newer checkpoint, a file of that name is put there first)
last2=""
for d in "$ckpt"/step-*; do [ -e "$d/COMPLETE" ] && last2=$(basename "$d" | sed 's/^step-0*//'); done
[ -e "$out/run.resumed-$last2.h5" ] || : > "$out/run.resumed-$last2.h5"
sed -i "s/steps = $((step + 1));/steps = $((last2 + 1));/" "$cfg"
rl_job 3 "$cfg" "$out/third" --resume
[ -f "$out/run.resumed-$last2-2.h5" ] || { ls "$out"; fail "the second resume's metrics file"; }
# a resume stopped before its first step (a requeued job that meets its time limit's
# signal again at once, as tests/slurm.sh once saw): exit 3, and no new checkpoint --
# the one it resumed from is complete (it used to ask the training rank, which had not
# built its trainer yet, for a model: "checkpoint of step N not written", exit 1).
# The signal goes when the resume is logged, which is almost always before the
# first new step; after it, this is a plain stop, which must pass as well.
sed -i "s/steps = $((last2 + 1));/steps = $((last2 + 40));/; s/log_level = \"warn\"/log_level = \"info\"/" "$cfg"
$MPIRUN -np 3 "$LIBRA" "$cfg" --resume > "$out/fourth.stdout" 2> "$out/fourth.stderr" &
job=$!
n=0
until grep -q "resumed from step" "$out/fourth.stdout" "$out/fourth.stderr" 2> /dev/null; do
    kill -0 $job 2> /dev/null || { cat "$out/fourth.stderr"; fail "the fourth run ended before resuming"; }
    n=$((n + 1))
    [ $n -le $((RL_HANG_S * 20)) ] || { kill -9 $job; fail "no resume after $RL_HANG_S s"; }
    sleep 0.05
done
kill -USR1 $job
wait $job
rc=$?
[ $rc -eq 3 ] || { tail -5 "$out/fourth.stderr"; fail "a resume stopped at once ended with $rc (3 expected)"; }
! grep -q "not written" "$out/fourth.stderr" || fail "a resume stopped at once failed its checkpoint"
# requeued before any checkpoint: a fresh start whose metrics file keeps the first's
rl_config "$out/fresh.cfg" "$out/fresh.h5" 1 1 1 2 1 \
    "checkpoint_interval = 2; checkpoint_dir = \"$out/ckpt-fresh\";"
: > "$out/fresh.h5" # the first attempt's file
(export SLURM_RESTART_COUNT=2; rl_job 3 "$out/fresh.cfg" "$out/fresh") || exit 1
grep -q "has no checkpoint to resume from: starting afresh" "$out/fresh.stdout" \
    || fail "the requeued job without a checkpoint did not say it starts afresh"
"$CHECK_RUN" "$out/fresh.restart-2.h5" --min-steps 1 || fail "check_run of the restarted run"
[ -n "${KEEP:-}" ] || rm -rf "$out"
