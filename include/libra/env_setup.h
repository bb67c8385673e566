/*
 * The one place where the run configuration (env section, run.seed) becomes the
 * environment's parameters, so rank 0, the rollout ranks and `libra sft` build the
 * very same environment.
 */
#ifndef LIBRA_ENV_SETUP_H
#define LIBRA_ENV_SETUP_H

#include "libra/config.h"
#include "libra/env.h"

void env_params_from_config(const struct libra_config *cfg, struct env_params *p);

#endif
