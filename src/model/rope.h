/*
 * Private to src/model/: the rotary table of a model, with the rope_scaling types of
 * Hugging Face config.json (tfm_config.rope_type: default, linear, llama3, yarn).
 * rope.c states the formulas and how they follow transformers' ROPE_INIT_FUNCTIONS.
 *
 * Glossary: D head_dim, P positions of a table.
 */
#ifndef LIBRA_MODEL_ROPE_H
#define LIBRA_MODEL_ROPE_H

#include "libra/tfm.h"

/* inv_freq (D/2): the angle per position of each rotary pair (i, i + D/2), as Hugging
 * Face computes it in float32 for c's rope_theta and rope_scaling. Returns the factor
 * cos and sin are multiplied by (yarn's attention factor; 1 for the other types).
 * c must pass tfm_config_check. */
float rope_inv_freq(float *inv_freq, const struct tfm_config *c);

/* rope_table (the table itself) is public: include/libra/tfm.h. */

/* 1 if a and b build the same table (equal head_dim, rope_theta and rope_scaling
 * fields; for yarn without original_max_pos, max_position_embeddings too), else 0. */
int rope_same(const struct tfm_config *a, const struct tfm_config *b);

#endif
