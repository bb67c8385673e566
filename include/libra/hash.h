/*
 * Fingerprints to check that copies agree, not cryptographic hashes: FNV-1a over
 * bytes (short keys, tests), XXH3 over a model's weights on the host, and the sum
 * fingerprint (hash_core.h) over weights a GPU holds.
 */
#ifndef LIBRA_HASH_H
#define LIBRA_HASH_H

#include <stddef.h>
#include <stdint.h>

#include <string.h>
#include <xxhash.h>

#include "libra/hash_core.h"

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

/* The fingerprint the training replicas compare after every step (device
 * weights_hash): XXH3-64 of the float32 weights' bytes, from libxxhash. FNV-1a's
 * byte-at-a-time multiply chain ran at 1.0 GB/s on one core, XXH3 at 19 GB/s: for a
 * model of 4B parameters (16 GB) 15 s against 0.8 s a step. */
static inline uint64_t weights_hash_floats(const float *x, size_t n)
{
    return (uint64_t)XXH3_64bits(x, n * sizeof *x);
}

/* The sum fingerprint (hash_core.h) of x[0 .. n), which the CUDA module's
 * weights_hash computes where the weights are: device cuda's replicas compare it, so
 * that weights kept on the GPUs are hashed there, one pass over them in GPU memory,
 * instead of being copied to the host after every step. On the host it runs at about
 * a quarter of XXH3's rate (2.5 against 10 GB/s on one core of the development
 * machine): device cpu keeps XXH3. */
static inline uint64_t weights_sum_hash(const float *x, size_t n)
{
    uint64_t h = 0;
    for (size_t k = 0; k < n; k++) {
        uint32_t b;
        memcpy(&b, &x[k], sizeof b);
        h += weights_sum_hash_term(b, (uint64_t)k);
    }
    return h;
}

#endif
