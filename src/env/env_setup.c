/* The environment's parameters from the run configuration (include/libra/env_setup.h). */
#include "libra/env_setup.h"

#include <stdio.h>
#include <string.h>

void env_params_from_config(const struct libra_config *cfg, struct env_params *p)
{
    memset(p, 0, sizeof *p);
    p->kind = strcmp(cfg->env.name, "search") == 0 ? ENV_KIND_SEARCH
              : strcmp(cfg->env.name, "calc") == 0 ? ENV_KIND_CALC
                                                   : ENV_KIND_EMU;
    p->seed = cfg->run.seed;
    snprintf(p->prompts, sizeof p->prompts, "%s", cfg->env.prompts);
    p->max_bad_fraction = cfg->env.max_bad_fraction;
    p->format_bonus = cfg->env.format_bonus;
    p->malformed_call_penalty = cfg->env.malformed_call_penalty;
    p->calc_min_steps = cfg->env.calc_min_steps;
    p->calc_max_steps = cfg->env.calc_max_steps;
    p->calc_distractors = cfg->env.calc_distractors;
    p->search_entities = cfg->env.search_entities;
    p->search_top_k = cfg->env.search_top_k;
    p->search_max_hops = cfg->env.search_max_hops;
    p->demo_mistake_rate = cfg->env.demo_mistake_rate;
}
