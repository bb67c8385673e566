#!/bin/sh
# The GPU engine's tensor parallelism over MPI: tests/test_gpu_tp_mpi on 4 ranks (TP 2
# and TP 4 groups sharing the node's GPU 0 through host-staged all-reduces; on the host
# stand-in of the CUDA module where there is no GPU); rank 0 prints the CUnit summary.
. "$(dirname "$0")/mpi_common.sh"
export OPENBLAS_NUM_THREADS=1
timeout -k 10 300 $MPIRUN -np 4 "$top_builddir/tests/test_gpu_tp_mpi" || fail "test_gpu_tp_mpi (exit $?; 124: hung)"
echo "ok: the GPU engine's tensor parallelism over MPI"
