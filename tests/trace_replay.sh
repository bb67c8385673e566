#!/bin/sh
# Trace replay (docs/emulation.md §4.5): a libra-sim run of the emulated workload,
# its rollouts exported as a trace (libra --trace-export), the same config replaying
# that trace (workload.trace), and the replay's own export: every trajectory the
# replay finished is, turn for turn, the trace trajectory it maps to (trajectory t of
# prompt p -> sample t mod m of trace group p mod G), with the same prompt length and
# reward. Then the export's usage and error exits.
. "$(dirname "$0")/mpi_common.sh"
out=$(scratch tracereplay)
SIM="$top_builddir/src/libra-sim"
config() { # FILE OUTFILE TRACE
    cat > "$1" <<CFG
run = { name = "trace-replay"; steps = 12; seed = 5; progress_interval_s = 100.0; };
device = { type = "emu"; hardware = "hardware/a800.cfg"; time_scale = 40.0; };
model = { profile = "models/qwen3-4b.cfg"; };
rollout = { n_samples = 4; max_turns = 8; max_tokens_per_turn = 2048; max_tokens = 16384; };
train = { batch_size = 32; max_staleness = 1; };
workload = { preset = "workloads/r2e-gym.cfg"; trace = "$3"; };
output = { file = "$2"; };
CFG
}
config "$out/record.cfg" "$out/record.h5" ""
"$SIM" "$out/record.cfg" --np 9 --out "$out/record.h5" > "$out/record.log" 2>&1 \
    || { tail -n 20 "$out/record.log"; fail "the recording run exited non-zero"; }
"$LIBRA" --trace-export "$out/record.h5" "$out/trace.jsonl" 2> "$out/export.log" \
    || { cat "$out/export.log"; fail "--trace-export of the recording failed"; }
grep -q "^libra --trace-export: [0-9]* trajectories$" "$out/export.log" || fail "no count printed"
config "$out/replay.cfg" "$out/replay.h5" "$out/trace.jsonl"
"$SIM" "$out/replay.cfg" --np 9 --out "$out/replay.h5" > "$out/replay.log" 2>&1 \
    || { tail -n 20 "$out/replay.log"; fail "the replaying run exited non-zero"; }
"$LIBRA" --trace-export "$out/replay.h5" > "$out/replayed.jsonl" 2> "$out/export2.log" \
    || { cat "$out/export2.log"; fail "--trace-export of the replay failed"; }
cat > "$out/check.py" <<'PY'
import json, sys
def lines(p):
    return [json.loads(l) for l in open(p) if l.strip()]
groups = []
for t in lines(sys.argv[1]):
    if not groups or groups[-1][0] != t["prompt"]:
        groups.append((t["prompt"], []))
    groups[-1][1].append(t)
n = bad = 0
for t in lines(sys.argv[2]):
    g = groups[t["prompt"] % len(groups)][1]
    want = g[t["traj"] % len(g)]
    n += 1
    if (want["turns"], want["prompt_tokens"], want.get("reward")) != (t["turns"], t["prompt_tokens"], t.get("reward")):
        bad += 1
        if bad <= 3:
            print("trajectory %d of prompt %d: replayed %s, trace %s" % (t["traj"], t["prompt"], t["turns"], want["turns"]))
print("trace replay: %d trajectories replayed, %d differ (trace: %d groups)" % (n, bad, len(groups)))
sys.exit(1 if bad or n < int(sys.argv[3]) else 0)
PY
python3 "$out/check.py" "$out/trace.jsonl" "$out/replayed.jsonl" 100 || fail "the simulated replay differs from the trace"
# The MPI job replays it too (rank 0 loads the trace and sends it to the workers).
sed -e 's|steps = 12;|steps = 4;|' -e "s|$out/replay.h5|$out/replay-mpi.h5|" "$out/replay.cfg" > "$out/replay-mpi.cfg"
$MPIRUN -np 9 "$LIBRA" "$out/replay-mpi.cfg" > "$out/replay-mpi.log" 2>&1 \
    || { tail -n 20 "$out/replay-mpi.log"; fail "the replaying MPI job exited non-zero"; }
"$LIBRA" --trace-export "$out/replay-mpi.h5" > "$out/replayed-mpi.jsonl" 2> "$out/export3.log" \
    || { cat "$out/export3.log"; fail "--trace-export of the MPI replay failed"; }
python3 "$out/check.py" "$out/trace.jsonl" "$out/replayed-mpi.jsonl" 20 || fail "the MPI job's replay differs from the trace"
# Usage and errors: exit 2 on usage, 1 with the file named on a bad input.
"$LIBRA" --trace-export > /dev/null 2>&1; [ $? -eq 2 ] || fail "--trace-export without a file must exit 2"
echo "not hdf5" > "$out/bad.h5"
"$LIBRA" --trace-export "$out/bad.h5" > /dev/null 2> "$out/bad.log"; [ $? -eq 1 ] || fail "a bad file must exit 1"
grep -q "bad.h5: not a readable HDF5 file" "$out/bad.log" || fail "the bad file is not named"
# A broken trace is refused up front, with its line.
printf '{"prompt": 0, "prompt_tokens": 5, "turns": [{"gen": 1}]}\n{"prompt": 1}\n' > "$out/broken.jsonl"
config "$out/broken.cfg" "$out/broken.h5" "$out/broken.jsonl"
"$SIM" "$out/broken.cfg" --np 9 --out "$out/broken.h5" > "$out/broken.log" 2>&1 && fail "a broken trace must be refused"
grep -q "broken.jsonl:2: prompt_tokens: missing" "$out/broken.log" || { cat "$out/broken.log"; fail "the broken trace's line is not named"; }
[ ! -e "$out/broken.h5" ] || fail "a refused trace must not leave a metrics file"
# The shipped example: the CPU RL run's trace, planned for 96 GPUs.
"$SIM" "$top_srcdir/inputs/trace-replay.cfg" --np 97 --out "$out/example.h5" > "$out/example.log" 2>&1 \
    || { tail -n 20 "$out/example.log"; fail "inputs/trace-replay.cfg did not run"; }
"$CHECK_RUN" "$out/example.h5" --min-steps 40 || fail "check_run on the example's metrics file"
echo "trace replay: OK"
