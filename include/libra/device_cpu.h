/*
 * The CPU device (src/device/cpu/): the real transformer of src/model on OpenBLAS,
 * one rank per device. See include/libra/device.h for the operations.
 *
 * The CUDA device shares its host side (shards, weight syncs, checkpoints, joins: all
 * staged through host memory) and runs the compute on the rank's GPU (src/device/gpu/):
 * the decoder of a rollout instance and the training replica's forwards and backwards;
 * the optimizer step stays on the host parameters. TP 1 only for now; each rank takes
 * GPU (its node-local rank) mod (the node's GPUs).
 */
#ifndef LIBRA_DEVICE_CPU_H
#define LIBRA_DEVICE_CPU_H

#include <mpi.h>

#include "libra/device.h"
#include "libra/tfm_tp.h"

extern const struct device_ops device_cpu;
extern const struct device_ops device_cuda;

/* The model layer's collectives (struct tfm_comm) over an MPI communicator, as the
 * device's TP instances and replicas use them (for benchmarks and tools). The comm is
 * not owned; free the result with device_cpu_comm_free. */
struct tfm_comm *device_cpu_comm_create(MPI_Comm comm);
void device_cpu_comm_free(struct tfm_comm *c);

#endif
