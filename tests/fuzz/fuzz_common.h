/*
 * Shared by the fuzz targets (tests/fuzz, built and run by tools/fuzz with clang's
 * libFuzzer): the input as a file, for the parsers that read paths.
 */
#ifndef LIBRA_FUZZ_COMMON_H
#define LIBRA_FUZZ_COMMON_H

#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* Writes data to this process's scratch file (made once, rewritten each time) and
 * returns its path. */
static const char *fuzz_file(const uint8_t *data, size_t size, const char *suffix)
{
    static char path[64];
    if (!path[0]) snprintf(path, sizeof path, "/tmp/libra-fuzz-%d%s", (int)getpid(), suffix);
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    if (fclose(f) != 0) abort();
    return path;
}

#endif
