#!/bin/sh
# 4 ranks (controller + 3 workers), a scripted plan that moves ranks between
# rollout, training and hybrid every epoch; the checker reads the metrics file.
. "$(dirname "$0")/mpi_common.sh"
out=$(scratch mpi4)
emu_config "$out/run.cfg" 12 1 "$out/run.h5" \
  '{ n_train = 1; rollout_tp = [1, 1]; },
   { n_train = 2; rollout_tp = [1]; },
   { n_train = 1; n_hybrid = 1; rollout_tp = [1]; },
   { n_train = 1; rollout_tp = [2]; }'
$MPIRUN -np 4 "$LIBRA" "$out/run.cfg" > "$out/stdout" 2> "$out/stderr" \
  || { cat "$out/stdout" "$out/stderr"; fail "4-rank run exited non-zero"; }
tail -n 4 "$out/stdout"
"$CHECK_RUN" "$out/run.h5" --min-steps 12 --min-plans 12 --expect-moves --expect-handback || fail "check_run"
[ -n "${KEEP:-}" ] || rm -rf "$out"
