/*
 * The weights' sum fingerprint, term by term, for the host and (under nvcc) the GPU:
 * the fingerprint of n floats is the sum, modulo 2^64, of one mixed term per element,
 * the element's bits mixed with its index. A sum in any order is the same sum, so a
 * GPU adds the terms in parallel and gets the host's bits exactly (weights_sum_hash in
 * hash.h; the CUDA module's weights_hash). For a given index the term is a bijection
 * of the bits, so two copies that differ in one element always differ in the sum; that
 * several differences cancel has the odds of a 64-bit collision. Header only (core).
 */
#ifndef LIBRA_HASH_CORE_H
#define LIBRA_HASH_CORE_H

#include <stdint.h>

#include "libra/rng_core.h"

/* The term of element k whose float32 bits are bits. */
RNG_CORE_FN uint64_t weights_sum_hash_term(uint32_t bits, uint64_t k)
{
    return rng_core_mix((uint64_t)bits ^ (k * 0xd1b54a32d192ed03ULL));
}

#endif
