#!/bin/sh
# A lent (hybrid) training replica's state over MPI: tests/test_join_mpi (4 ranks),
# workers driven by hand through a join, a step's total, a shared step and a plan
# that makes the lent rank a core replica; every rank holding training state must
# hold the same one, bit for bit, after every step.
. "$(dirname "$0")/mpi_common.sh"
export OPENBLAS_NUM_THREADS=1
# a deadlock (a lane message nobody receives) fails instead of hanging
timeout -k 10 300 $MPIRUN -np 4 "$top_builddir/tests/test_join_mpi" || fail "test_join_mpi (exit $?; 124: hung)"
echo "ok: a lent replica's state over MPI"
