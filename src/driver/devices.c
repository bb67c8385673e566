/*
 * `libra --devices`: the GPUs the CUDA device module can use (name, memory, compute
 * capability), or why there are none (no module built, no driver, no GPU). The
 * module is loaded at run time (include/libra/cuda_module.h): libra itself links no
 * CUDA library. With LIBRA_CUDA_MODULE=host it lists the host stand-in's one device
 * (include/libra/cuda_host.h), saying it is no GPU.
 */
#include <stdio.h>

#include "libra/cli.h"
#include "libra/cuda_host.h"
#include "libra/cuda_module.h"
#include "libra/driver.h"

static const struct cli_cmd devices_cmd = {
    "libra devices", "libra devices",
    "Lists the GPUs the CUDA device module can use (name, memory, compute capability), or\n"
    "says why there are none (no module built, no driver, no GPU).\n",
    NULL, NULL, 0, 0, 0};

int cmd_devices(int argc, char **argv)
{
    struct cli cli;
    if (cli_operands(&cli, &devices_cmd, argc, argv) == CLI_EXIT) return cli.rc;
    char err[2048];
    const struct cuda_api *api = cuda_module_load(err, sizeof err);
    if (!api) {
        printf("libra: no GPU devices: %s. The cpu and emu devices are available.\n", err);
        return 0;
    }
    int cuda = 0, nccl = 0;
    api->versions(&cuda, &nccl);
    int n = api->device_count();
    if (api == cuda_host_api())
        printf("libra: LIBRA_CUDA_MODULE=host: the host stand-in of the CUDA module (device "
               "cuda's engine on the CPU references; no GPU)%s%s\n", n < 0 ? ": " : "",
               n < 0 ? api->last_error() : "");
    else if (n < 0)
        printf("libra: CUDA device module loaded (CUDA runtime %d, NCCL %d), but no usable "
               "GPU: %s\n", cuda, nccl, api->last_error());
    else
        printf("libra: %d GPU%s (CUDA runtime %d, NCCL %d)\n", n, n == 1 ? "" : "s", cuda, nccl);
    if (n < 0) return 0;
    for (int i = 0; i < n; i++) {
        char line[256];
        if (api->device_describe(i, line, sizeof line) == 0) printf("  %s\n", line);
        else printf("  GPU %d: %s\n", i, api->last_error());
    }
    return 0;
}
