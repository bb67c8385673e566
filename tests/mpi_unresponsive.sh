#!/bin/sh
# Liveness: a rank that stops responding ends the job in bounded time instead of
# hanging it. An emulated 4-rank run (heartbeats every 0.2 s, run.unresponsive_s = 3)
# has one of its processes stopped with SIGSTOP:
#   a worker (rank 2): rank 0 ends the job with exit status 4, names the rank and its
#     host, and the metrics file reads "failed" with the message as an error event;
#   rank 0: the workers notice the silent controller and end the job, exit status 4;
#   a worker while the plan changes every step: rank 0 either notices it in its loop
#   or is blocked in the re-split's MPI_Comm_split that the stopped rank never joins,
#   where only its watchdog thread can end the job -- exit status 4 either way.
. "$(dirname "$0")/mpi_common.sh"
out=$(scratch unresponsive)

config() { # FILE METRICS [PLAN]
    plan=${3:-'plan = { n_train = 1; rollout_tp = [1, 1]; };'}
    cat > "$1" <<CFG
run = { name = "liveness"; steps = 100000; seed = 7; progress_interval_s = 0.5;
        heartbeat_s = 0.2; unresponsive_s = 3.0; };
device = { type = "emu"; hardware = "hardware/a800.cfg"; time_scale = 50.0; };
model = { profile = "models/qwen3-4b.cfg"; };
rollout = { n_samples = 2; max_turns = 4; max_tokens_per_turn = 1024; max_tokens = 8192; };
train = { batch_size = 8; max_staleness = 1; sync_interval = 1; };
$plan
workload = { preset = "workloads/search-r1.cfg"; };
output = { file = "$2"; };
CFG
}

# pid_of_rank CONFIG RANK: the process of that rank (Open MPI names it in the environment)
pid_of_rank() {
    for p in $(pgrep -f "$LIBRA $1"); do
        tr '\0' '\n' < "/proc/$p/environ" 2> /dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && { echo "$p"; return; }
    done
}

# stop_case NAME RANK MESSAGE [PLAN]: starts the job, stops RANK once the run is under
# way, expects exit status 4 within a bound and MESSAGE (a grep -E pattern) on stderr
stop_case() {
    cfg="$out/$1.cfg"
    config "$cfg" "$out/$1.h5" "${4:-}"
    $MPIRUN -np 4 "$LIBRA" "$cfg" > "$out/$1.out" 2> "$out/$1.err" &
    job=$!
    n=0
    pid=""
    while [ -z "$pid" ] || ! grep -q "^step [1-9]" "$out/$1.out" 2> /dev/null; do
        n=$((n + 1))
        kill -0 $job 2> /dev/null || { cat "$out/$1.err"; fail "$1: the job ended early"; }
        [ $n -le 600 ] || { kill -9 $job; fail "$1: no step after 60 s"; }
        [ -n "$pid" ] || pid=$(pid_of_rank "$cfg" "$2")
        sleep 0.1
    done
    kill -STOP "$pid"
    t0=$(date +%s)
    n=0
    while kill -0 $job 2> /dev/null; do
        n=$((n + 1))
        # the bound: run.unresponsive_s (3 s) plus the abort; 120 s means it hung
        [ $n -le 1200 ] || { kill -CONT "$pid"; kill -9 $job; pkill -9 -f "$cfg"; fail "$1: the job still runs 120 s after rank $2 stopped"; }
        sleep 0.1
    done
    wait $job
    rc=$?
    kill -CONT "$pid" 2> /dev/null
    pkill -9 -f "$cfg" 2> /dev/null
    [ $rc = 4 ] || { cat "$out/$1.err"; fail "$1: exit status $rc (4 expected)"; }
    grep -Eq "$3" "$out/$1.err" || { cat "$out/$1.err"; fail "$1: no '$3' on stderr"; }
    echo "ok: $1: ended $(( $(date +%s) - t0 )) s after rank $2 stopped: $(grep -Em1 "$3" "$out/$1.err" | cut -c1-200)"
}

stop_case worker 2 "rank 2 on host .* has sent nothing for"
if /usr/bin/python3 -c "import h5py" 2> /dev/null; then
    /usr/bin/python3 - "$out/worker.h5" <<'PY' || fail "worker: the metrics file"
import sys, h5py
f = h5py.File(sys.argv[1], "r")
status = f.attrs["status"]
status = status.decode() if isinstance(status, bytes) else status
assert status == "failed", status
name = {v: k for k, v in h5py.check_enum_dtype(f["events"].dtype["kind"]).items()}
kinds = [name[k] for k in f["events"]["kind"]]
details = [d.decode() if isinstance(d, bytes) else d for d in f["events"]["detail"]]
assert any(k == "error" and "rank 2 on host" in d for k, d in zip(kinds, details)), details[-3:]
print("ok: worker: the metrics file reads failed and records the rank")
PY
fi
stop_case controller 0 "rank 0 \(the controller\) has sent nothing for"
stop_case resplit 2 "rank 2 on host .* has sent nothing for|stuck for [0-9]+ s in a re-split" \
    'plan = { mode = "schedule"; interval = 1; schedule = ( { n_train = 1; rollout_tp = [1, 1]; }, { n_train = 2; rollout_tp = [1]; } ); };'
[ -n "${KEEP:-}" ] || rm -rf "$out"
