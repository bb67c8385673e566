/*
 * Loading the CUDA device module (src/libra-cuda.so, include/libra/cuda_api.h) at run
 * time. Looked for, in order: $LIBRA_CUDA_MODULE (a path); libra-cuda.so beside the
 * running program; ../src/libra-cuda.so from it (the tests of a build tree); the
 * installed $(pkglibdir)/libra-cuda.so. Loaded once per process; thread-safe.
 * LIBRA_CUDA_MODULE=host (exactly) selects the host module instead: the same interface
 * computed on the CPU by the CPU references (include/libra/cuda_host.h), for running
 * device cuda's engine and its tests without a GPU (docs/cuda.md); nothing is loaded.
 */
#ifndef LIBRA_CUDA_MODULE_H
#define LIBRA_CUDA_MODULE_H

#include <stddef.h>

#include "libra/cuda_api.h"

/* The module's table, or NULL with the reason in err: not built (every path tried
 * is named, with how to build it), not loadable (dlerror), or of another ABI. A module
 * that loads may still find no driver or GPU: api->device_count() says so. */
const struct cuda_api *cuda_module_load(char *err, size_t errlen);

#endif
