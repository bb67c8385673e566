/* Fuzz target: a run configuration file (libconfig syntax, then libra's schema and
 * checks; src/config). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "libra/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct libra_config cfg;
    char err[1024];
    const char *path = fuzz_file(data, size, ".cfg");
    err[0] = '\0';
    if (config_load(path, &cfg, err, sizeof err) != 0 && !err[0])
        __builtin_trap(); /* every refusal says why */
    return 0;
}
