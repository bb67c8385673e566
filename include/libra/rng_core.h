/*
 * The arithmetic of libra's counter-based random streams (include/libra/rng.h) as
 * inline functions that compile for the host and, under nvcc, for the GPU too: the
 * CUDA sampler draws the very numbers the CPU sampler draws for the same (seed,
 * trajectory, position), so a seed gives the same decisions on both devices given the
 * same logits. src/core/rng.c is written with these; header only (core layer).
 */
#ifndef LIBRA_RNG_CORE_H
#define LIBRA_RNG_CORE_H

#include <stdint.h>

#ifdef __CUDACC__
#define RNG_CORE_FN static inline __host__ __device__
#else
#define RNG_CORE_FN static inline
#endif

/* SplitMix64's finaliser. */
RNG_CORE_FN uint64_t rng_core_mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* The key of the stream (seed, a, b, c). */
RNG_CORE_FN uint64_t rng_core_key(uint64_t seed, uint64_t a, uint64_t b, uint64_t c)
{
    uint64_t k = rng_core_mix(seed);
    k = rng_core_mix(k ^ a);
    k = rng_core_mix(k ^ rng_core_mix(b + 0x632be59bd9b4e019ULL));
    return rng_core_mix(k ^ rng_core_mix(c + 0x85157af5ULL));
}

/* Draw number ctr (0, 1, ...) of the stream with key. */
RNG_CORE_FN uint64_t rng_core_u64(uint64_t key, uint64_t ctr)
{
    return rng_core_mix(rng_core_mix(key ^ (ctr * 0xd1b54a32d192ed03ULL)));
}

/* A uniform double in (0, 1): 53 random bits shifted by half an ulp. */
RNG_CORE_FN double rng_core_uniform(uint64_t key, uint64_t ctr)
{
    return ((double)(rng_core_u64(key, ctr) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

#endif
