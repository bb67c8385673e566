/*
 * The rollout decode engine on a GPU: the CPU decoder's interface
 * (include/libra/tfm_decode.h) over a model on the GPU (include/libra/gpu_model.h),
 * with the KV cache in a paged pool (vLLM's PagedAttention layout).
 *
 * The KV pool: blocks of GPU_KV_BLOCK tokens, each holding every layer's keys and
 * values of those tokens in bf16 (as vLLM keeps them in the model's dtype): half the
 * memory and half the bytes a decode step reads of float32 keys, for a rounding of
 * each key and value to 8 significant bits (docs/cuda.md). A slot's cache is a table of block ids; blocks
 * are taken from a free list as a slot grows and given back when it is truncated or
 * reset. gpu_decoder_fork makes a slot share another's blocks (the trajectories of one
 * prompt share its prefill); a shared block is copied before it is written (copy on
 * write), so sharing never changes what a slot computes.
 *
 * Rows: a prefill chunk of one slot, or one new token of each of n slots. A layer runs
 * the training path's order of operations (src/model/tfm_forward.c) with the CUDA
 * module's kernels; activations are float32 and rounded to bf16 where they enter a
 * matrix product (cuBLASLt, bf16 operands, float32 accumulation), so logits agree with
 * the CPU decoder's to the bf16 rounding of the activations (docs/cuda.md gives the
 * measured differences). Attention reads every row's keys through its slot's block
 * table (kv_append, then decode_attn), a prefill chunk's rows included.
 *
 * Tensor parallelism (gpu_decoder_create_tp): each rank of a TP-t instance holds its
 * shard of the model (include/libra/tfm_tp.h: its heads, F/t of the MLP, its rows of
 * the vocabulary) and the KV cache of its kv heads; the residual stream is replicated
 * and summed over the group (struct gpu_comm) after the embedding and after each
 * row-parallel product (o_proj, down_proj): 2 L + 1 all-reduces of (rows, C) floats a
 * forward. Tokens are global ids; the logits are this rank's vocabulary rows, sampled
 * with sampler_sample_tp. Every call that runs a forward is collective: every rank of
 * the group makes it with the same arguments.
 *
 * Errors: a slot or the pool that cannot take the tokens is a -1 return with nothing
 * added; a failed CUDA call ends the job (FATAL, naming the call and the CUDA error).
 */
#ifndef LIBRA_GPU_DECODE_H
#define LIBRA_GPU_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "libra/gpu_comm.h"
#include "libra/gpu_model.h"
#include "libra/sampler.h"
#include "libra/tfm_tp.h"

#define GPU_KV_BLOCK 16 /* tokens per KV block */
/* Decode steps of up to this many rows take gemv by default (gpu_decoder_set_gemv):
 * the crossover tools/bench-gpu measures (README, Performance). */
#define GPU_GEMV_ROWS 2

struct gpu_decoder;

/* n_slots slots of at most slot_capacity tokens; prefill in chunks of prefill_chunk
 * rows. kv_bytes: the pool's size; 0 = room for every slot at full capacity, or what
 * 90 % of the GPU's free memory left after the scratch holds, whichever is less (the
 * slots then share the blocks there are). NULL + message if the pool cannot hold
 * even one full slot. */
struct gpu_decoder *gpu_decoder_create(const struct gpu_model *m, int n_slots, int slot_capacity,
                                       int prefill_chunk, size_t kv_bytes, char *err,
                                       size_t errlen);
/* gpu_decoder_create for rank tp->rank of a TP-t instance: m holds that rank's shard
 * (gpu_model_upload of tp->local with tfm_tp_shard's weights), comm is the group (size
 * t, the rank tp->rank; unused and may be NULL at t == 1; it must outlive the decoder).
 * tp NULL: the whole model, as gpu_decoder_create. NULL + message when m is not the
 * shard or comm not the group. */
struct gpu_decoder *gpu_decoder_create_tp(const struct gpu_model *m, const struct tfm_tp *tp,
                                          struct gpu_comm *comm, int n_slots, int slot_capacity,
                                          int prefill_chunk, size_t kv_bytes, char *err,
                                          size_t errlen);
void gpu_decoder_free(struct gpu_decoder *d);
/* Appends n tokens to the slot's context; copies the logits (V; at TP > 1 this rank's
 * vocabulary rows, here and below) of the last one to the host if last_logits != NULL (they stay on the GPU for gpu_decoder_sample either way).
 * -1 if the slot's capacity or the pool would be exceeded (nothing added). */
int gpu_decoder_prefill(struct gpu_decoder *d, int slot, const int32_t *tokens, int n,
                        float *last_logits);
/* Appends tokens[i] to slots[i] (distinct slots); copies the logits (n, V) to the host
 * if logits != NULL. -1 if a slot is full or the pool is out of blocks (nothing added). */
int gpu_decoder_step(struct gpu_decoder *d, const int *slots, const int32_t *tokens, int n,
                     float *logits);
/* Samples one token from each row of the logits the last prefill (1 row) or step
 * (n rows) left on the GPU, with sampler_sample's decisions under *sc
 * (include/libra/sampler.h: greedy at temperature <= 0, top-k, top-p): row i for
 * trajectory traj[i] at position pos[i]. tok (n) and logprob (n, or NULL) are host
 * arrays. n must equal that call's rows. At TP > 1 (collective: every rank of the
 * group, the same arguments, the same tokens back) greedy, plain temperature and
 * top-k (then top-p) with at most GPU_SAMPLE_TOPK_MAX (1,024) candidates over the
 * ranks, sampler_sample_tp's decisions with its steps batched over the rows: one
 * all-reduce of 3t doubles a row for greedy; at a temperature a max of 1, a sum of 2t
 * and a sum of 2 a row; top-k a max of 1 and a sum of t + 2n a row -- at most three
 * all-reduces a step, where sampler_sample_tp makes two or three a row. The sums of
 * each rank's share are in chunks, so a temperature's token can differ from
 * sampler_sample_tp's where that rounding moves a boundary (measure zero); top-k's
 * candidates, and so its tokens, are sampler_sample_tp's. */
void gpu_decoder_sample(struct gpu_decoder *d, int n, const struct sampler_config *sc,
                        const int64_t *traj, const int64_t *pos, int32_t *tok, float *logprob);
/* Whether gpu_decoder_sample takes rows sampled under *sc on this decoder (TP 1: all;
 * TP > 1: greedy, plain temperature, and top-k with at most 1,024 candidates). */
int gpu_decoder_samples_on_gpu(const struct gpu_decoder *d, const struct sampler_config *sc);
/* The logits (rows x V) the last prefill / step left on the GPU, into the host. */
void gpu_decoder_logits(struct gpu_decoder *d, float *logits);
/* dst's cache becomes src's context (dst is reset first): the blocks are shared. */
void gpu_decoder_fork(struct gpu_decoder *d, int dst, int src);
int gpu_decoder_len(const struct gpu_decoder *d, int slot);
/* Keeps the first len tokens of the slot's cache (len <= current length); blocks past
 * them go back to the pool. */
void gpu_decoder_truncate(struct gpu_decoder *d, int slot, int len);
/* The pool's blocks: free ones and all of them. */
void gpu_decoder_blocks(const struct gpu_decoder *d, int *free_blocks, int *total_blocks);
/* 1 (the default): each distinct row count's forward is recorded once as a CUDA graph
 * and replayed (one launch instead of some 20 a layer); 0: the kernels are launched
 * one by one. The results are the same bits either way. A TP group whose all-reduce
 * cannot be recorded (gpu_comm.graph_safe 0) launches one by one whatever is asked.
 * Returns the setting now in force. */
int gpu_decoder_set_graphs(struct gpu_decoder *d, int on);
/* 1: the decode kernels of a forward (embedding, gemv, q/k/v, attention) are launched
 * with programmatic dependent launch (the module's launch_overlap): each starts, and
 * loads its first weights, while the one before it finishes. The same bits either
 * way. Off by default; on only where the GPU has it (compute capability 9.0 on).
 * Returns the setting now in force. */
int gpu_decoder_set_overlap(struct gpu_decoder *d, int on);
/* Prefill chunks of GPU_PREFILL_FLASH_ROWS rows or more attend on the tensor cores
 * (prefill_attn: bf16 probabilities) when on and the head dimension allows
 * (cuda_flash_supports), else with decode attention (float32); on by default.
 * Returns the previous setting. */
#define GPU_PREFILL_FLASH_ROWS 8
int gpu_decoder_set_flash(struct gpu_decoder *d, int on);
/* Forwards of up to `rows` rows (decode steps of few slots; at most
 * CUDA_GEMV_MAX_ROWS) run their matrix products through the module's gemv (the bf16
 * rounding, q/k/v and gate/up/SwiGLU fused; each weight read once at full bandwidth
 * but every row's arithmetic on CUDA cores), more rows through cuBLASLt as prefill
 * chunks do; 0: cuBLASLt always. The default is GPU_GEMV_ROWS where the model's
 * shapes suit gemv (widths multiples of 8), else 0. Returns the bound now in force. */
int gpu_decoder_set_gemv(struct gpu_decoder *d, int rows);
/* Bytes of GPU memory held (KV pool + scratch; the model not included). */
size_t gpu_decoder_bytes(const struct gpu_decoder *d);

#endif
