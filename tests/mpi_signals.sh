#!/bin/sh
# Signals on an emulated 4-rank run (the handling is the device's as much as the CPU
# engine's; rl_cpu_signal.sh covers SIGUSR1 with checkpoints and the resume):
#   SIGTERM to every rank (what scancel and Slurm's time limit send) and SIGINT to
#     every rank (Ctrl-C under mpirun): the run stops at its next consistent point,
#     exit status 3, the metrics file reads "cancelled" with a cancel event;
#   a second signal while the first stop is under way ends the job at once (the
#     signal's default action): not exit 0, not 3, and in bounded time.
. "$(dirname "$0")/mpi_common.sh"
out=$(scratch signals)

config() { # FILE METRICS
    cat > "$1" <<CFG
run = { name = "signals"; steps = 100000; seed = 7; progress_interval_s = 0.5; };
device = { type = "emu"; hardware = "hardware/a800.cfg"; time_scale = 50.0; };
model = { profile = "models/qwen3-4b.cfg"; };
rollout = { n_samples = 2; max_turns = 4; max_tokens_per_turn = 1024; max_tokens = 8192; };
train = { batch_size = 8; max_staleness = 1; sync_interval = 1; };
plan = { n_train = 1; rollout_tp = [1, 1]; };
workload = { preset = "workloads/search-r1.cfg"; };
output = { file = "$2"; };
CFG
}

# start NAME: the job in the background ($job), once its first step is done
start() {
    config "$out/$1.cfg" "$out/$1.h5"
    $MPIRUN -np 4 "$LIBRA" "$out/$1.cfg" > "$out/$1.out" 2> "$out/$1.err" &
    job=$!
    n=0
    until grep -q "^step [0-9]" "$out/$1.out" 2> /dev/null; do
        n=$((n + 1))
        kill -0 $job 2> /dev/null || { cat "$out/$1.err"; fail "$1: the job ended early"; }
        [ $n -le 600 ] || { kill -9 $job; fail "$1: no step after 60 s"; }
        sleep 0.1
    done
}

# finish NAME: waits (bounded) for the job; its exit status in $rc
finish() {
    n=0
    while kill -0 $job 2> /dev/null; do
        n=$((n + 1))
        [ $n -le 1200 ] || { kill -9 $job; pkill -9 -f "$out/$1.cfg"; fail "$1: the job still runs 120 s after the signal"; }
        sleep 0.1
    done
    rc=0
    wait $job || rc=$?
}

for sig in TERM INT; do
    start "$sig"
    pkill -"$sig" -f "^$LIBRA $out/$sig.cfg"
    finish "$sig"
    [ $rc = 3 ] || { cat "$out/$sig.err"; fail "SIG$sig: exit status $rc (3 expected)"; }
    grep -q "stop requested by signal" "$out/$sig.err" || { cat "$out/$sig.err"; fail "SIG$sig: no stop message"; }
    "$CHECK_RUN" "$out/$sig.h5" --expect-status cancelled --expect-event cancel || fail "SIG$sig: check_run"
    echo "ok: SIG$sig: exit 3, the metrics file reads cancelled"
done

start twice
pkill -INT -f "^$LIBRA $out/twice.cfg"
pkill -INT -f "^$LIBRA $out/twice.cfg"
finish twice
[ $rc != 0 ] && [ $rc != 3 ] || { cat "$out/twice.err"; fail "a second SIGINT: exit status $rc (the job should end at once, not cleanly)"; }
echo "ok: a second SIGINT ended the job at once (exit status $rc)"
[ -n "${KEEP:-}" ] || rm -rf "$out"
