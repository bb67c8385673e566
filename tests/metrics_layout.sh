#!/bin/sh
# The metrics file as docs/metrics.md documents it, checked on real runs (an emulated
# 4-rank run with the cmlfq scheduler and the global resource planner, and a 3-rank
# CPU RL run with evaluations), so the document and the files cannot drift apart:
#   tests/metrics_layout.py: every table's columns, their order, types and units, the
#     root attributes, the /config group;
#   the worked example of docs/metrics.md (its "analyse.py" block) runs on both files
#     and writes its figure; its h5dump commands run on the CPU run's file.
. "$(dirname "$0")/mpi_common.sh"
. "$(dirname "$0")/rl_common.sh"
out=$(scratch metrics-layout)
py=/usr/bin/python3
$py -c "import h5py, numpy, matplotlib" 2> /dev/null || fail "needs python3-h5py, python3-numpy and python3-matplotlib (tools/setup-test)"
command -v h5dump > /dev/null || fail "needs h5dump (hdf5-tools; tools/setup-test)"

cat > "$out/emu.cfg" <<CFG
run = { name = "layout"; steps = 8; seed = 7; progress_interval_s = 100.0; };
device = { type = "emu"; hardware = "hardware/a800.cfg"; time_scale = 300.0; };
model = { profile = "models/qwen3-4b.cfg"; };
rollout = { n_samples = 2; max_turns = 4; max_tokens_per_turn = 1024; max_tokens = 8192; };
train = { batch_size = 8; max_staleness = 1; sync_interval = 1; };
plan = { mode = "grp"; interval = 2; min_history = 4; max_train_tp = 1; max_rollout_tp = 2; };
sched = { type = "cmlfq"; };
workload = { preset = "workloads/search-r1.cfg"; };
output = { file = "$out/emu.h5"; };
CFG
$MPIRUN -np 5 "$LIBRA" "$out/emu.cfg" > "$out/emu.out" 2> "$out/emu.err" \
    || { cat "$out/emu.err"; fail "the emulated run failed"; }
rl_config "$out/cpu.cfg" "$out/cpu.h5" 4 1 1 1 1
sed -i -e 's|^eval = { size = 16; interval = 0; };|eval = { size = 8; interval = 2; };|' \
    -e "s|^output = { file = \"$out/cpu.h5\"; };|output = { file = \"$out/cpu.h5\"; sample_interval = 2; samples = 2; };|" "$out/cpu.cfg"
grep -q "sample_interval = 2" "$out/cpu.cfg" || fail "the CPU config was not edited"
rl_job 3 "$out/cpu.cfg" "$out/cpu"

$py "$top_srcdir/tests/metrics_layout.py" "$top_srcdir/docs/metrics.md" "$out/emu.h5" "$out/cpu.h5" \
    || fail "the files differ from docs/metrics.md"

# the worked example, as the document prints it
$py - "$top_srcdir/docs/metrics.md" > "$out/analyse.py" <<'PY'
import sys
text = open(sys.argv[1], encoding="utf-8").read()
for block in text.split("```python\n")[1:]:
    code = block.split("\n```", 1)[0]
    if code.startswith("# analyse.py"):
        print(code)
        break
PY
grep -q "savefig" "$out/analyse.py" || fail "no worked example (a python block starting '# analyse.py') in docs/metrics.md"
for run in emu cpu; do
    $py "$out/analyse.py" "$out/$run.h5" > "$out/$run.analysis" 2> "$out/$run.analysis.err" \
        || { cat "$out/$run.analysis.err"; fail "the worked example fails on the $run run"; }
    grep -q "^complete: [0-9]* steps of [0-9]* trajectories in" "$out/$run.analysis" \
        && grep -q "^throughput: " "$out/$run.analysis" && grep -q "^from step 0: " "$out/$run.analysis" \
        || { cat "$out/$run.analysis"; fail "the worked example's summary of the $run run"; }
    head -c 8 "$out/$run.h5.png" | od -An -tx1 | grep -q "89 50 4e 47" || fail "no figure from the $run run"
done
echo "ok: worked example: $(head -n 2 "$out/cpu.analysis" | tr '\n' ' ')"

# its h5dump commands
h5dump -a /status "$out/cpu.h5" | grep -q '"complete"' || fail "h5dump -a /status"
h5ls "$out/cpu.h5/steps" | grep -q "Dataset {4/Inf}" || fail "h5ls RUN.h5/steps"
h5dump -A -g /config/train "$out/cpu.h5" | grep -q 'ATTRIBUTE "batch_size"' || fail "h5dump -A -g /config/train"
h5dump -d /steps -s 3 -c 1 "$out/cpu.h5" > /dev/null || fail "h5dump -d /steps -s 3 -c 1"
h5dump -d /plans "$out/cpu.h5" | grep -q '"static"' || fail "h5dump -d /plans"
echo "ok: h5dump commands"

# /samples: output.samples rows every output.sample_interval steps, real text
$py - "$out/cpu.h5" <<'PY' || fail "/samples of the CPU run"
import sys, h5py
s = h5py.File(sys.argv[1], "r")["samples"][:]
assert list(s["step"]) == [2, 2, 4, 4], list(s["step"])
text = lambda v: v.decode() if isinstance(v, bytes) else v
for r in s:
    p, c = text(r["prompt"]), text(r["completion"])
    assert len(p) > 10 and len(c) > 0, (p, c)
print("ok: /samples: %d rows, e.g. %r ... %r" % (len(s), text(s[0]["prompt"])[-40:], text(s[0]["completion"])[:60]))
PY
[ -n "${KEEP:-}" ] || rm -rf "$out"
