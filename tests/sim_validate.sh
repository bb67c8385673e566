#!/bin/sh
# libra-sim against the MPI emulated job: the same config run both ways, on 9 ranks
# (a static heterogeneous split, C-MLFQ) and on 17 ranks (the global resource
# planner with the elastic hybrid pool). The simulator's file must pass every
# check_run check, and both runs must agree within 10 % on trajectories/s and on the
# mean step time (check_sim; a disagreement is measured once more, see compare). A
# second simulation must give the same bytes.
. "$(dirname "$0")/mpi_common.sh"
out=$(scratch simvalidate)
SIM="$top_builddir/src/libra-sim"
CHECK_SIM="$top_builddir/tests/check_sim"
config() { # FILE OUTFILE PLAN SCHED
    cat > "$1" <<CFG
run = { name = "sim-validate"; steps = 8; seed = 3; progress_interval_s = 100.0; };
device = { type = "emu"; hardware = "hardware/a800.cfg"; time_scale = 40.0; };
model = { profile = "models/qwen3-4b.cfg"; };
rollout = { n_samples = 4; max_turns = 6; max_tokens_per_turn = 2048; max_tokens = 12288; };
train = { batch_size = 32; max_staleness = 1; sync_interval = 1; };
plan = { $3 };
sched = { type = "$4"; };
workload = { preset = "workloads/r2e-gym.cfg"; };
output = { file = "$2"; };
CFG
}
mpi_run() { # NAME RANKS
    rm -f "$out/$1-mpi.h5"
    $MPIRUN -np "$2" "$LIBRA" "$out/$1.cfg" > "$out/$1-mpi.log" 2>&1 \
      || { tail -n 20 "$out/$1-mpi.log"; fail "$1: the $2-rank MPI run exited non-zero"; }
}
# The MPI job's emulated clock runs on the wall clock: when something else loads this
# machine's cores, its ranks fall behind and it reports fewer trajectories/s. A
# disagreement is therefore re-measured once with a fresh MPI run; a real difference
# between the two models fails both times.
compare() { # NAME RANKS PLAN SCHED
    config "$out/$1.cfg" "$out/$1-mpi.h5" "$3" "$4"
    mpi_run "$1" "$2"
    "$SIM" "$out/$1.cfg" --np "$2" --out "$out/$1-sim.h5" > "$out/$1-sim.log" 2>&1 \
      || { tail -n 20 "$out/$1-sim.log"; fail "$1: libra-sim exited non-zero"; }
    "$CHECK_RUN" "$out/$1-sim.h5" --min-steps 8 || fail "$1: check_run on the simulator's file"
    echo "$1 ($2 ranks): MPI job vs libra-sim"
    "$CHECK_SIM" "$out/$1-mpi.h5" "$out/$1-sim.h5" 0.10 && return
    echo "$1: disagreement: measuring the MPI job once more"
    mpi_run "$1" "$2"
    "$CHECK_SIM" "$out/$1-mpi.h5" "$out/$1-sim.h5" 0.10 || fail "$1: the simulator disagrees"
}
compare static9 9 'mode = "static"; n_train = 4; rollout_tp = [2, 1, 1];' cmlfq
compare grp17 17 'mode = "grp"; min_history = 16; history = 64; max_train_tp = 2; pool = 1;' cmlfq
"$SIM" "$out/grp17.cfg" --np 17 --out "$out/again.h5" > /dev/null 2>&1 || fail "second simulation"
cmp "$out/grp17-sim.h5" "$out/again.h5" || fail "the same simulation gave different bytes"
[ -n "${KEEP:-}" ] || rm -rf "$out"
