#!/bin/sh
# The phase trace: a 6-rank emulated run whose scripted plan re-splits every 2 steps
# (TP-2 and TP-1 instances, one and two training replicas, a lent replica), then
# `libra trace` on its metrics file, checked against the trace-event format (valid
# JSON, the fields every event needs, timestamps in order per track, spans nested per
# track, thread names) and against the run (a span of every kind the run must have,
# plan changes as instants, one X event per /spans row). Also: its usage errors'
# messages for a file that is not HDF5 and for a metrics file without /spans.
. "$(dirname "$0")/mpi_common.sh"
out=$(scratch trace)
PY=/usr/bin/python3
emu_config "$out/run.cfg" 8 2 "$out/run.h5" \
  '{ n_train = 1; rollout_tp = [2, 1, 1]; },
   { n_train = 2; rollout_tp = [2, 1]; },
   { n_train = 1; n_hybrid = 1; rollout_tp = [2, 1]; },
   { n_train = 2; rollout_tp = [1, 1, 1]; }'
$MPIRUN -np 6 "$LIBRA" "$out/run.cfg" > "$out/stdout" 2> "$out/stderr" \
  || { cat "$out/stdout" "$out/stderr"; fail "6-rank run exited non-zero"; }
"$CHECK_RUN" "$out/run.h5" --min-steps 8 --min-plans 4 || fail "check_run"

"$LIBRA" trace "$out/run.h5" "$out/trace.json" 2> "$out/trace.err" \
  || { cat "$out/trace.err"; fail "libra trace exited non-zero"; }
"$LIBRA" trace "$out/run.h5" > "$out/stdout.json" 2> /dev/null || fail "libra trace to stdout"
cmp "$out/trace.json" "$out/stdout.json" || fail "the trace to a file and to stdout differ"

$PY - "$out/trace.json" "$out/run.h5" <<'PY' || fail "the trace does not check"
import json, sys
import h5py

trace, run = sys.argv[1], sys.argv[2]
bad = []
def check(ok, what):
    if not ok:
        bad.append(what)

with open(trace) as f:
    doc = json.load(f)                      # valid JSON
check(isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list), "object form")
check(doc.get("displayTimeUnit") == "ms", "displayTimeUnit")
events = doc["traceEvents"]
names, last_ts, stacks, kinds, instants = {}, {}, {}, set(), []
for k, e in enumerate(events):
    where = "event %d" % k
    for field, typ in (("name", str), ("ph", str), ("pid", int), ("tid", int)):
        check(isinstance(e.get(field), typ), "%s: %s" % (where, field))
    ph, tid = e.get("ph"), e.get("tid")
    check(ph in ("X", "i", "M"), "%s: ph %r" % (where, ph))
    if ph == "M":
        check(isinstance(e.get("args"), dict), where + ": metadata args")
        if e["name"] == "thread_name":
            names[tid] = e["args"].get("name")
        continue
    ts = e.get("ts")
    check(isinstance(ts, (int, float)) and ts >= 0, where + ": ts")
    check(ts >= last_ts.get(tid, 0), "%s: ts goes back on tid %d" % (where, tid))
    last_ts[tid] = ts
    if ph == "i":
        check(e.get("s") in ("g", "p", "t"), where + ": instant scope")
        instants.append(e)
        continue
    dur = e.get("dur")
    check(isinstance(dur, (int, float)) and dur >= 0, where + ": dur")
    kinds.add(e["name"])
    # spans of one track nest: a span ends inside the one it starts in
    st = stacks.setdefault(tid, [])
    while st and st[-1] <= ts + 1e-6:
        st.pop()
    check(not st or ts + dur <= st[-1] + 1e-6, "%s: span overlaps its enclosing one on tid %d" % (where, tid))
    st.append(ts + dur)
for tid in last_ts:
    check(tid in names, "tid %d has no thread_name" % tid)
check(names.get(0) == "rank 0 (controller)", "rank 0's track name")
check(any("rollout TP-2 leader" in n for n in names.values()), "a TP-2 leader's track name")
for k in ("decode", "tool", "train_fwd", "train_bwd", "train_reduce", "train_opt",
          "weight_sync", "resplit"):
    check(k in kinds, "no %s span" % k)
check(any(e["name"] == "resplit" and e["s"] == "g" for e in instants), "no resplit instant")
check(any(e["name"] == "plan" for e in instants), "no plan instant")

with h5py.File(run, "r") as f:
    check(f.attrs["schema_version"] == 7, "schema_version")
    sp = f["spans"][:]
    ev = f["events"][:]
    kind_code = h5py.check_enum_dtype(f["spans"].dtype["kind"])  # the HDF5 enum: name -> code
check(kind_code is not None, "/spans kind is an HDF5 enum")
check(sum(e["ph"] == "X" for e in events) == len(sp), "one X event per /spans row")
check(len(instants) == len(ev), "one instant per /events row")
check((sp["t_end"] >= sp["t_start"]).all(), "/spans t_end >= t_start")
# training phases come from every training rank: two replicas in epochs 1 and 3
fwd = sp[sp["kind"] == kind_code["train_fwd"]]
check(any(len(set(fwd[fwd["step"] == s]["rank"])) >= 2 for s in set(fwd["step"])),
      "no step with training spans from two replicas")
if bad:
    print("\n".join(bad[:20]))
    sys.exit(1)
print("trace: %d events, %d spans, tracks %d, kinds %s" % (len(events), len(sp), len(names),
      ",".join(sorted(kinds))))
PY

# errors: not an HDF5 file; an HDF5 file without /spans
echo "not hdf5" > "$out/plain.h5"
"$LIBRA" trace "$out/plain.h5" > /dev/null 2> "$out/err1" && fail "a non-HDF5 file was accepted"
grep -q "not a readable HDF5 file" "$out/err1" || { cat "$out/err1"; fail "message for a non-HDF5 file"; }
$PY -c 'import h5py, sys
with h5py.File(sys.argv[1], "w") as f:
    f.attrs["schema_version"] = 5' "$out/old.h5" || fail "h5py"
"$LIBRA" trace "$out/old.h5" > /dev/null 2> "$out/err2" && fail "a file without /spans was accepted"
grep -q "no /spans table.*schema 5" "$out/err2" || { cat "$out/err2"; fail "message for a file without /spans"; }
[ -n "${KEEP:-}" ] || rm -rf "$out"
