/* Counter-based random streams (see include/libra/rng.h). */
#include "libra/rng.h"

#include <math.h>

uint64_t rng_mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

void rng_init(struct rng *r, uint64_t seed, uint64_t a, uint64_t b, uint64_t c)
{
    uint64_t k = rng_mix(seed);
    k = rng_mix(k ^ a);
    k = rng_mix(k ^ rng_mix(b + 0x632be59bd9b4e019ULL));
    k = rng_mix(k ^ rng_mix(c + 0x85157af5ULL));
    r->key = k;
    r->ctr = 0;
}

uint64_t rng_u64(struct rng *r)
{
    uint64_t x = r->key ^ (r->ctr++ * 0xd1b54a32d192ed03ULL);
    return rng_mix(rng_mix(x));
}

double rng_uniform(struct rng *r)
{
    /* 53 random bits, shifted by half an ulp so 0 and 1 are never returned. */
    return ((double)(rng_u64(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
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
