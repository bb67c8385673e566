#!/bin/sh
# A checkpoint that cannot be written in the middle of a run: the checkpoint
# directory is a small tmpfs (96 MB: enough for the start-up free-space check, 74 MB
# for this model, with one 10 MB checkpoint in it) that the test fills up once the step-2 checkpoint is complete, so a
# later one meets a full disk (ENOSPC), as on a cluster's scratch space.
#   fail (the default)  the job exits 1 naming the step and the file; the metrics file
#                       reads "failed"; step 2's checkpoint is kept; a --resume once
#                       the space is back removes the unfinished .tmp directory (a
#                       log line says so) and completes the run from step 2;
#   warn                the run completes every step, exit 0, the summary counts the
#                       checkpoints not written and names the newest complete one
#                       (step 2's, never deleted for a newer one that failed).
# Needs root (mount); elsewhere it reports itself skipped.
. "$(dirname "$0")/mpi_common.sh"
. "$(dirname "$0")/rl_common.sh"
out=$(scratch rl-ckptfull)
disk="$out/disk"
mkdir -p "$disk"
if ! mount -t tmpfs -o size=96m libra-test "$disk" 2> "$out/mount.err"; then
    echo "skip: cannot mount a small tmpfs here ($(cat "$out/mount.err")): a full disk needs root"
    rm -rf "$out"
    exit 77
fi
trap 'umount "$disk" 2> /dev/null' EXIT

# run_full NAME CHECKPOINT_KEYS: starts the job, fills the disk once step 2's
# checkpoint is complete, and leaves the job's exit status in $rc.
run_full() {
    rl_config "$out/$1.cfg" "$out/$1.h5" 8 1 1 1 1 \
        "checkpoint_interval = 2; checkpoint_keep = 3; checkpoint_dir = \"$disk/$1\"; $2"
    timeout -k 10 $RL_HANG_S $MPIRUN -np 3 "$LIBRA" "$out/$1.cfg" > "$out/$1.stdout" \
        2> "$out/$1.stderr" &
    job=$!
    i=0
    while [ ! -e "$disk/$1/step-00000002/COMPLETE" ] && kill -0 $job 2> /dev/null; do
        sleep 0.1
        i=$((i + 1))
        [ $i -lt 1800 ] || break
    done
    [ -e "$disk/$1/step-00000002/COMPLETE" ] || { cat "$out/$1.stderr"; fail "$1: no checkpoint of step 2"; }
    dd if=/dev/zero of="$disk/filler" bs=1M 2> /dev/null || true # until the disk is full
    rc=0
    wait $job || rc=$?
    rm -f "$disk/filler"
}

run_full fail ''
[ $rc = 1 ] || { tail -n 5 "$out/fail.stdout"; cat "$out/fail.stderr"; fail "fail: exit status $rc with the disk full (1 expected)"; }
grep -q "checkpoint of step [0-9]* not written: .*(run.checkpoint_on_error = \"fail\"" "$out/fail.stderr" \
    || { cat "$out/fail.stderr"; fail "fail: no message naming the step that could not be written"; }
echo "ok: fail: $(grep -m1 -o "checkpoint of step [0-9]* not written: [a-z.0-9]*" "$out/fail.stderr")"
"$CHECK_RUN" "$out/fail.h5" --aborted || fail "fail: check_run"
[ -e "$disk/fail/step-00000002/COMPLETE" ] || fail "fail: the complete checkpoint of step 2 is gone"
ls -d "$disk"/fail/step-*.tmp > /dev/null 2>&1 || fail "fail: no unfinished .tmp directory to clean up"
sed -i "s|$out/fail.h5|$out/resumed.h5|" "$out/fail.cfg"
rl_job 3 "$out/fail.cfg" "$out/resumed" --resume
grep -q "removed 1 unfinished checkpoint directory (.tmp)" "$out/resumed.stdout" \
    || { cat "$out/resumed.stdout"; fail "resume: the .tmp directory's removal is not reported"; }
grep -q "resuming from checkpoint step 2 " "$out/resumed.stdout" || fail "resume: not from step 2"
ls -d "$disk"/fail/step-*.tmp > /dev/null 2>&1 && fail "resume: a .tmp directory is left"
[ -e "$disk/fail/step-00000008/COMPLETE" ] || fail "resume: no final checkpoint of step 8"
echo "ok: resumed from step 2 and completed step 8"
rm -rf "$disk/fail"

run_full warn 'checkpoint_on_error = "warn";'
[ $rc = 0 ] || { cat "$out/warn.stderr"; fail "warn: exit status $rc (0 expected: the run goes on)"; }
grep -q "libra: [0-9]* checkpoints\{0,1\} not written (run.checkpoint_on_error = \"warn\"; see the \"error\" events): the newest complete one is of step 2" \
    "$out/warn.stdout" || { tail -n 8 "$out/warn.stdout"; fail "warn: the summary does not count the checkpoints not written"; }
echo "ok: warn: $(grep -m1 "not written" "$out/warn.stdout")"
"$CHECK_RUN" "$out/warn.h5" --min-steps 8 --expect-event error || fail "warn: check_run"
[ -e "$disk/warn/step-00000002/COMPLETE" ] || fail "warn: the complete checkpoint of step 2 is gone"
umount "$disk"
trap - EXIT
[ -n "${KEEP:-}" ] || rm -rf "$out"
