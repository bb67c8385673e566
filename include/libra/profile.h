/*
 * Hardware and model profiles: the numbers the emulated backend and the planner's
 * cost model need. Each lives in its own libconfig file under inputs/hardware/ and
 * inputs/models/, with every key validated (unknown keys rejected) and errors as
 *     file:line: key: what is wrong (hint)
 * Units are SI throughout: bytes, seconds, FLOP/s, bytes/s.
 */
#ifndef LIBRA_PROFILE_H
#define LIBRA_PROFILE_H

#include <stddef.h>
#include <stdio.h>

struct hw_profile {
    char name[32];
    double flops_peak;      /* dense bf16 FLOP/s per GPU */
    double mem_bw;          /* HBM bytes/s per GPU */
    double mem_capacity;    /* HBM bytes per GPU */
    double bw_intra_node;   /* NVLink bytes/s per GPU, one direction */
    double bw_inter_node;   /* network bytes/s per GPU (per-node NIC total / gpus_per_node) */
    int gpus_per_node;
    double latency_intra_s; /* one intra-node collective hop, seconds */
    double latency_inter_s; /* one inter-node message, seconds */
};

struct model_profile {
    char name[32];
    char family[16];        /* qwen3 | qwen3_moe | llama | qwen2 */
    double n_params;        /* total parameters */
    double n_active_params; /* parameters touched per token (= n_params for dense) */
    int n_layers;
    int hidden;
    int n_heads;
    int n_kv_heads;
    int head_dim;
    int vocab;
    int intermediate;       /* dense MLP width, or per-expert width for MoE */
    int n_experts;          /* 0 for dense */
    int n_active_experts;   /* experts routed per token, 0 for dense */
    int dtype_bytes;        /* 2 for bf16 */
};

int profile_load_hw(const char *path, struct hw_profile *hw, char *err, size_t errlen);
int profile_load_model(const char *path, struct model_profile *m, char *err, size_t errlen);
void profile_print_hw(const struct hw_profile *hw, FILE *out);
void profile_print_model(const struct model_profile *m, FILE *out);

#endif
