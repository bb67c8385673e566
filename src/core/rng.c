/* Counter-based random streams (see include/libra/rng.h). */
#include "libra/rng.h"

#include <math.h>

#include "libra/rng_core.h" /* the arithmetic, shared with the CUDA sampler */

uint64_t rng_mix(uint64_t x) { return rng_core_mix(x); }

void rng_init(struct rng *r, uint64_t seed, uint64_t a, uint64_t b, uint64_t c)
{
    r->key = rng_core_key(seed, a, b, c);
    r->ctr = 0;
}

uint64_t rng_u64(struct rng *r) { return rng_core_u64(r->key, r->ctr++); }

double rng_uniform(struct rng *r)
{
    /* 53 random bits, shifted by half an ulp so 0 and 1 are never returned. */
    return rng_core_uniform(r->key, r->ctr++);
}

uint64_t rng_below(struct rng *r, uint64_t n)
{
    /* Lemire's multiply-shift; the bias (< n / 2^64) is irrelevant at our n. */
    return (uint64_t)(((unsigned __int128)rng_u64(r) * n) >> 64);
}

double rng_normal(struct rng *r)
{
    /* Box-Muller, one value per call so a stream's n-th draw is position-stable. */
    double u1 = rng_uniform(r), u2 = rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

double rng_lognormal(struct rng *r, double mu, double sigma)
{
    return exp(mu + sigma * rng_normal(r));
}

double rng_exponential(struct rng *r, double mean)
{
    return -mean * log(rng_uniform(r));
}

int rng_categorical(struct rng *r, const double *weights, int n)
{
    double total = 0;
    for (int i = 0; i < n; i++) total += weights[i];
    double u = rng_uniform(r) * total;
    for (int i = 0; i < n; i++) {
        if (u < weights[i]) return i;
        u -= weights[i];
    }
    return n - 1;
}
