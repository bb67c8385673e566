/*
 * Counter-based random numbers (STYLE 10): a stream is a key derived from a tuple
 * (seed, a, b, c) -- e.g. (seed, trajectory, turn, purpose) -- plus a counter. The
 * n-th draw of a stream is a pure function of (key, n), so results never depend on
 * which rank draws them or in what order different streams are used.
 *
 * The mixer is SplitMix64's finaliser applied twice over key and counter; it passes
 * the statistical checks we need (uniformity, independence between nearby keys) for
 * simulation and sampling, and it is not cryptographic.
 */
#ifndef LIBRA_RNG_H
#define LIBRA_RNG_H

#include <stdint.h>

struct rng {
    uint64_t key;
    uint64_t ctr;
};

uint64_t rng_mix(uint64_t x);
/* A stream keyed by the tuple; different tuples give independent streams. */
void rng_init(struct rng *r, uint64_t seed, uint64_t a, uint64_t b, uint64_t c);
uint64_t rng_u64(struct rng *r);
/* Uniform in the open interval (0, 1). */
double rng_uniform(struct rng *r);
/* Uniform integer in [0, n); n > 0. */
uint64_t rng_below(struct rng *r, uint64_t n);
double rng_normal(struct rng *r);
double rng_lognormal(struct rng *r, double mu, double sigma);
double rng_exponential(struct rng *r, double mean);
/* Index drawn with probability weights[i] / sum(weights); n > 0, weights >= 0. */
int rng_categorical(struct rng *r, const double *weights, int n);

#endif
