/*
 * FNV-1a over bytes: a cheap fingerprint to check that copies agree (training
 * replicas' parameters), not a cryptographic hash.
 */
#ifndef LIBRA_HASH_H
#define LIBRA_HASH_H

#include <stddef.h>
#include <stdint.h>

static inline uint64_t fnv1a_bytes(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ULL;
    return h;
}

static inline uint64_t fnv1a_floats(const float *x, size_t n)
{
    return fnv1a_bytes(x, n * sizeof *x);
}

#endif
