/*
 * The CPU device (src/device/cpu/): the real transformer of src/model on OpenBLAS,
 * one rank per device. See include/libra/device.h for the operations.
 */
#ifndef LIBRA_DEVICE_CPU_H
#define LIBRA_DEVICE_CPU_H

#include "libra/device.h"

extern const struct device_ops device_cpu;

#endif
