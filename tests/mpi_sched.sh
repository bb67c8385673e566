#!/bin/sh
# The four scheduler policies in a 9-rank emulated job on a heterogeneous layout
# (instances of TP 1, 1, 2 and 2, then 1, 2 and 4 after a re-split): each run must
# account for every trajectory and leave consistent /sched, /migrations and
# /instances tables; C-MLFQ must also leave its prefix tree in /tree, and a second
# C-MLFQ run must start from that tree (sched.tree_in).
. "$(dirname "$0")/mpi_common.sh"
out=$(scratch mpisched)
plans='{ n_train = 2; rollout_tp = [1, 1, 2, 2]; },
       { n_train = 1; rollout_tp = [1, 2, 4]; }'
buckets='buckets = ( { name = "short"; tp = [1]; max_tokens = 1500; },
                     { name = "medium"; tp = [2]; max_tokens = 4000; },
                     { name = "long"; tp = [4]; max_tokens = 12000; } );'
for type in cmlfq load_balance length_aware la_mlfq; do
    case $type in
        cmlfq) extra="$buckets min_samples = 2; max_recent = 64; rebuild_interval = 4;" ;;
        load_balance) extra='instance_queue = "fifo";' ;;
        length_aware) extra="$buckets" ;;
        la_mlfq) extra="$buckets scout_timeout_s = 120.0;" ;;
    esac
    emu_config "$out/$type.cfg" 8 4 "$out/$type.h5" "$plans" "sched = { type = \"$type\"; $extra };"
    $MPIRUN -np 9 "$LIBRA" "$out/$type.cfg" > "$out/$type.stdout" 2> "$out/$type.stderr" \
      || { cat "$out/$type.stdout" "$out/$type.stderr"; fail "$type: 9-rank run exited non-zero"; }
    grep "scheduler $type" "$out/$type.stdout" || fail "$type: no scheduler summary line"
    tree=""
    [ "$type" = cmlfq ] && tree=--expect-tree
    "$CHECK_RUN" "$out/$type.h5" --min-steps 8 --sched $tree || fail "$type: check_run"
done
# A second C-MLFQ run starts from the first one's tree.
emu_config "$out/again.cfg" 4 4 "$out/again.h5" "$plans" \
  "sched = { type = \"cmlfq\"; $buckets min_samples = 2; tree_in = \"$out/cmlfq.h5\"; };"
$MPIRUN -np 9 "$LIBRA" "$out/again.cfg" > "$out/again.stdout" 2> "$out/again.stderr" \
  || { cat "$out/again.stdout" "$out/again.stderr"; fail "cmlfq from a saved tree exited non-zero"; }
grep -q "prefix tree from" "$out/again.stdout" "$out/again.stderr" || fail "tree_in not reported"
"$CHECK_RUN" "$out/again.h5" --min-steps 4 --expect-tree || fail "again: check_run"
[ -n "${KEEP:-}" ] || rm -rf "$out"
