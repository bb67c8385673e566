#!/bin/sh
# Tensor parallelism and shard-matched weight syncs over MPI: the CUnit programs
# tests/test_tp_mpi (4 ranks) and tests/test_sync_mpi (10 ranks), every rank running
# the collective suites; rank 0 prints the CUnit summary.
. "$(dirname "$0")/mpi_common.sh"
export OPENBLAS_NUM_THREADS=1
# a deadlock (e.g. a TP instance's quiesce waiting forever) fails instead of hanging
timeout -k 10 300 $MPIRUN -np 4 "$top_builddir/tests/test_tp_mpi" || fail "test_tp_mpi (exit $?; 124: hung)"
$MPIRUN -np 10 "$top_builddir/tests/test_sync_mpi" || fail "test_sync_mpi"
echo "ok: tensor parallelism and weight syncs over MPI"
