#!/bin/sh
# Kill and resume, again and again: a CPU-device run that checkpoints after every step
# is SIGKILLed (every process of the job, mpirun included) at 10 points -- each a
# random moment, 0 to 0.8 s, after a checkpoint newer than the segment's start is
# complete -- and resumed after each; the 11th segment runs to the end. Nothing may
# be lost or repeated: in the final checkpoint's state every prompt id launched is
# trained exactly once, or buffered, or waiting to be launched again -- none twice,
# none missing -- and the run's steps all happened (step = run.steps).
. "$(dirname "$0")/mpi_common.sh"
. "$(dirname "$0")/rl_common.sh"
out=$(scratch rl-killloop)
cfg="$out/run.cfg" # the pattern that finds this job's processes
ckpt="$out/ckpt"
steps=48
rl_config "$cfg" "$out/run.h5" $steps 1 "1" 1 1 \
    "checkpoint_interval = 1; checkpoint_keep = 2; checkpoint_dir = \"$ckpt\";"

newest() { # the newest complete checkpoint's step, 0 if none
    n=0
    for d in "$ckpt"/step-*; do
        [ -e "$d/COMPLETE" ] && n=$(basename "$d" | sed 's/^step-0*//')
    done
    echo "${n:-0}"
}

kills=0 seg=0
while [ $kills -lt 10 ]; do
    seg=$((seg + 1))
    start=$(newest)
    [ "$start" -lt $((steps - 1)) ] || fail "the run reached step $start before 10 kills"
    resume=""
    [ "$start" -gt 0 ] && resume="--resume"
    # shellcheck disable=SC2086
    $MPIRUN -np 3 "$LIBRA" "$cfg" $resume > "$out/seg$seg.stdout" 2> "$out/seg$seg.stderr" &
    job=$!
    n=0
    while [ "$(newest)" -le "$start" ]; do
        kill -0 $job 2> /dev/null || { cat "$out/seg$seg.stderr"; fail "segment $seg ended by itself"; }
        n=$((n + 1))
        [ $n -le $((RL_HANG_S * 10)) ] || { kill_job "$cfg"; fail "segment $seg: no new checkpoint after $RL_HANG_S s"; }
        sleep 0.1
    done
    sleep "$(awk -v s="$seg" 'BEGIN { srand(1000 + s); printf "%.2f", 0.8 * rand() }')"
    kill_job "$cfg"
    wait $job 2> /dev/null
    kills=$((kills + 1))
    echo "kill $kills: segment $seg started at step $start, newest checkpoint now $(newest)"
done
rl_job 3 "$cfg" "$out/final" --resume
[ "$(newest)" = $steps ] || fail "the final checkpoint is of step $(newest), not $steps"

/usr/bin/python3 - "$ckpt/step-$(printf %08d $steps)/state.h5" $steps << 'PYEOF' || fail "prompts lost or repeated across the kills"
import collections, sys
import h5py
f = h5py.File(sys.argv[1], "r")
step, nxt = int(f.attrs["step"]), int(f.attrs["next_prompt"])
trained = [int(x) for x in f["trained"][()]]
buffered = [int(x) for x in f["groups/prompt_id"][()]] if "groups/prompt_id" in f else []
relaunch = [int(x) for x in f["relaunch"][()]]
seen = collections.Counter(trained + buffered + relaunch)
twice = sorted(p for p, c in seen.items() if c > 1)
missing = sorted(set(range(nxt)) - set(seen))
print("final state: step %d, %d prompts launched: %d trained, %d buffered, %d to relaunch"
      % (step, nxt, len(trained), len(buffered), len(relaunch)))
if twice or missing or step != int(sys.argv[2]):
    sys.exit("repeated %s, missing %s, step %d" % (twice[:10], missing[:10], step))
PYEOF
[ -n "${KEEP:-}" ] || rm -rf "$out"
