#!/bin/sh
# 9 ranks: instances of TP 1, 2 and 4 form and dissolve, a hybrid rank joins
# training, ranks move every epoch; nothing may be lost and staleness stays bounded.
. "$(dirname "$0")/mpi_common.sh"
out=$(scratch mpi9)
emu_config "$out/run.cfg" 12 1 "$out/run.h5" \
  '{ n_train = 4; rollout_tp = [2, 1, 1]; },
   { n_train = 2; n_hybrid = 1; rollout_tp = [2, 2, 1]; },
   { n_train = 3; rollout_tp = [4, 1]; },
   { n_train = 2; rollout_tp = [2, 2, 1, 1]; }'
$MPIRUN -np 9 "$LIBRA" "$out/run.cfg" > "$out/stdout" 2> "$out/stderr" \
  || { cat "$out/stdout" "$out/stderr"; fail "9-rank run exited non-zero"; }
tail -n 4 "$out/stdout"
"$CHECK_RUN" "$out/run.h5" --min-steps 12 --min-plans 12 --expect-moves --expect-handback || fail "check_run"
[ -n "${KEEP:-}" ] || rm -rf "$out"
