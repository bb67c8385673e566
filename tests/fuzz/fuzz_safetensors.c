/* Fuzz target: a safetensors file (header JSON, offsets, dtypes; src/io/safetensors.c). */
#include <stdint.h>

#include "fuzz_common.h"
#include "libra/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct st_file f;
    char err[1024];
    const char *path = fuzz_file(data, size, ".safetensors");
    if (st_open(&f, path, err, sizeof err) == 0) st_close(&f);
    return 0;
}
