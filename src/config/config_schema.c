/*
 * The configuration schema table (see config_schema.h) and the few helpers that
 * turn a row into words, shared by the loader's messages and the reference so the
 * two can never disagree. Adding a key = adding a field to include/libra/config.h
 * and one row here; regenerate docs/config.md afterwards. A key that only some
 * settings use says so with ONLY(enum key, values); that enum's row must come
 * earlier in the table (the loader reads rows in order). The keys of a
 * sched.buckets group and the default buckets are the two tables at the end.
 */
#include "config_schema.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OFF(f) offsetof(struct libra_config, f)
#define SZ(f) sizeof(((struct libra_config *)0)->f)
#define SOFF(f) offsetof(struct plan_spec, f)
#define SSZ(f) sizeof(((struct plan_spec *)0)->f)

/* The last parameter, the doc line, is variadic so that a row may append more
 * designators after it: INT_KEY(..., "doc", ONLY("type", "cmlfq")). */
#define INT_KEY(sec, k, f, d, lo, hi, u, ...)                                              \
    {.section = sec, .key = k, .type = CFG_INT, .offset = OFF(f), .size = SZ(f), .def = d, \
     .min = lo, .max = hi, .units = u, .doc = __VA_ARGS__}
#define FLOAT_KEY(sec, k, f, d, lo, hi, u, ...)                                              \
    {.section = sec, .key = k, .type = CFG_FLOAT, .offset = OFF(f), .size = SZ(f), .def = d, \
     .min = lo, .max = hi, .units = u, .doc = __VA_ARGS__}
/* Strings: lo..hi is the length; t is CFG_STRING, CFG_NAME or CFG_PATH. */
#define STR_KEY(sec, k, t, f, d, lo, hi, ...)                                          \
    {.section = sec, .key = k, .type = t, .offset = OFF(f), .size = SZ(f), .def_s = d, \
     .min = lo, .max = hi, .units = "", .doc = __VA_ARGS__}
#define ENUM_KEY(sec, k, f, d, vals, ...)                                                    \
    {.section = sec, .key = k, .type = CFG_ENUM, .offset = OFF(f), .size = SZ(f), .def_s = d, \
     .allowed = vals, .units = "", .doc = __VA_ARGS__}
#define SPEC_INT_KEY(k, fl, f, d, lo, hi, doc_)                                                \
    {.section = "plan", .key = k, .type = CFG_INT, .flags = CFG_SPEC | fl, .offset = SOFF(f),  \
     .size = SSZ(f), .def = d, .min = lo, .max = hi, .units = "ranks", .doc = doc_}
/* The row is used only when enum key w of its section is one of vals. */
#define ONLY(w, vals) .when = w, .when_in = vals
#define CMLFQ_ONLY ONLY("type", "cmlfq")
#define GRP_ONLY ONLY("mode", "grp")
#define MLFQ_QUEUE_ONLY ONLY("instance_queue", "mlfq")
#define WEIGHTED_ONLY ONLY("balance", "weighted")

/* 10^7 etc. spelled out so the reference prints plain numbers. */
#define E6 1000000.0
#define E7 10000000.0
#define E9 1000000000.0

const struct cfg_section cfg_sections[] = {
    {"run", "what to run and how it reports"},
    {"device", "the device backend, and the efficiency knobs of the cost model (emu)"},
    {"model", "the policy model"},
    {"rollout", "generation: GRPO group size and token budgets"},
    {"train", "the optimizer batch, staleness bound and weight sync"},
    {"plan", "the resource plan: which worker ranks train, lend, or serve rollouts"},
    {"sched", "routing of turns to rollout instances"},
    {"env", "the environment that runs tools and scores trajectories"},
    {"eval", "greedy evaluation on held-out problems (device.type = cpu)"},
    {"sft", "the supervised warm start: `libra sft CONFIG`"},
    {"workload", "the emulated workload (device.type = emu)"},
    {"output", "where the metrics file goes"},
    {NULL, NULL},
};

const struct cfg_key cfg_schema[] = {
    STR_KEY("run", "name", CFG_NAME, run.name, "libra", 1, CFG_NAME_MAX - 1,
            "run name, used in output file names"),
    INT_KEY("run", "steps", run.steps, 20, 1, E7, "steps", "optimizer steps to run"),
    {.section = "run", .key = "seed", .type = CFG_INT64, .offset = OFF(run.seed),
     .size = SZ(run.seed), .def = 1, .min = 0, .max = 9223372036854775807.0, .units = "",
     .doc = "root of every random stream (write 5000000000L beyond 2^31-1)"},
    ENUM_KEY("run", "log_level", run.log_level, "info", "error, warn, info, debug",
             "least severe message printed"),
    FLOAT_KEY("run", "progress_interval_s", run.progress_interval_s, 2.0, 0.05, 3600, "s",
              "period of rank 0's progress line, wall clock"),
    FLOAT_KEY("run", "target_reward", run.target_reward, 0.75, -1e9, 1e9, "reward",
              "time_to_target_reward: when the moving average of reward first reaches this"),
    INT_KEY("run", "checkpoint_interval", run.checkpoint_interval, 0, 0, E7, "steps",
            "steps between checkpoints; 0 = none"),
    STR_KEY("run", "checkpoint_dir", CFG_STRING, run.checkpoint_dir, "", 0, CFG_PATH_MAX - 1,
            "checkpoint directory; \"\" = <output.dir>/<run.name>-ckpt"),
    INT_KEY("run", "checkpoint_keep", run.checkpoint_keep, 2, 1, 1000, "checkpoints",
            "complete checkpoints kept (older ones are deleted)"),
    ENUM_KEY("run", "checkpoint_on_error", run.checkpoint_on_error, "fail", "fail, warn",
             "a checkpoint that cannot be written: fail ends the run (exit 1), warn records "
             "it and goes on"),
    FLOAT_KEY("run", "heartbeat_s", run.heartbeat_s, 2.0, 0.01, 3600, "s",
              "liveness: every worker and rank 0 signal they are alive this often"),
    FLOAT_KEY("run", "unresponsive_s", run.unresponsive_s, 0.0, 0, 1e7, "s",
              "a rank silent this long ends the job (exit 4); 0 = the larger of 600 s and "
              "10 x the longest step"),

    ENUM_KEY("device", "type", device.type, "emu", "emu, cpu, cuda",
             "emu: emulated GPUs; cpu: the transformer on OpenBLAS; cuda: the cpu device's "
             "host side, decoding and training on GPUs"),
    STR_KEY("device", "hardware", CFG_PATH, device.hardware, "hardware/a800.cfg", 1,
            CFG_PATH_MAX - 1, "hardware profile of one device (cost model, planner)"),
    FLOAT_KEY("device", "time_scale", device.time_scale, 1.0, 1e-3, 1e9, "emulated s / wall s",
              "emulation speed-up"),
    FLOAT_KEY("device", "decode_bw_util", device.decode_bw_util, 0.85, 0.05, 1, "fraction",
              "share of HBM bandwidth a decode step reaches"),
    FLOAT_KEY("device", "prefill_mfu", device.prefill_mfu, 0.55, 0.01, 1, "fraction",
              "model FLOP utilisation of prefill"),
    FLOAT_KEY("device", "train_mfu", device.train_mfu, 0.40, 0.01, 1, "fraction",
              "model FLOP utilisation of training"),
    FLOAT_KEY("device", "gpu_memory_utilization", device.gpu_memory_utilization, 0.90, 0.1, 1,
              "fraction", "share of HBM a rollout instance may use"),
    FLOAT_KEY("device", "kv_frag_rate", device.kv_frag_rate, 0.04, 0, 0.5, "fraction",
              "KV-cache capacity lost to fragmentation"),
    FLOAT_KEY("device", "act_workspace_gb", device.act_workspace_gb, 1.0, 0, 64, "GB",
              "activation workspace reserved per GPU"),

    STR_KEY("model", "profile", CFG_PATH, model.profile, "models/qwen3-14b.cfg", 1,
            CFG_PATH_MAX - 1, "model profile (architecture numbers; emu and the planner)"),
    {.section = "model", .key = "checkpoint", .type = CFG_PATH, .flags = CFG_DIR_OK,
     .offset = OFF(model.checkpoint), .size = SZ(model.checkpoint), .def_s = "", .min = 0,
     .max = CFG_PATH_MAX - 1, .units = "",
     .doc = "cpu: model to start from: an HDF5 model file, a run checkpoint directory or a "
            "Hugging Face directory (config.json + safetensors); \"\" = a fresh model of the "
            "shapes below"},
    {.section = "model", .key = "tokenizer", .type = CFG_PATH, .flags = CFG_DIR_OK,
     .offset = OFF(model.tokenizer), .size = SZ(model.tokenizer), .def_s = "", .min = 0,
     .max = CFG_PATH_MAX - 1, .units = "",
     .doc = "cpu: a tokenizer.json, or a directory holding one; \"\" = the checkpoint's own "
            "(tokenizer.json in a Hugging Face directory, else the byte-level tokenizer)"},
    ENUM_KEY("model", "chat_format", model.chat_format, "auto", "auto, libra, qwen3, llama3",
             "cpu: the conversation format: libra tags (byte-level models), the Qwen3 or "
             "Llama 3 chat template; auto = from the checkpoint (libra for HDF5 models, "
             "config.json's model_type for Hugging Face ones)"),
    INT_KEY("model", "enable_thinking", model.enable_thinking, 0, 0, 1, "",
            "qwen3 chat format: 1 = let the model open a <think> block; 0 = the template's "
            "empty thinking block after the generation prompt"),
    INT_KEY("model", "hidden_size", model.hidden_size, 128, 8, 65536, "", "fresh model: C"),
    INT_KEY("model", "n_layers", model.n_layers, 4, 1, 1024, "", "fresh model: layers"),
    INT_KEY("model", "n_heads", model.n_heads, 4, 1, 1024, "", "fresh model: attention heads"),
    INT_KEY("model", "n_kv_heads", model.n_kv_heads, 2, 1, 1024, "",
            "fresh model: key/value heads (divides n_heads)"),
    INT_KEY("model", "head_dim", model.head_dim, 32, 2, 1024, "", "fresh model: head dimension (even)"),
    INT_KEY("model", "intermediate_size", model.intermediate_size, 384, 1, 1048576, "",
            "fresh model: MLP width"),
    INT_KEY("model", "max_position", model.max_position, 512, 16, 1048576, "tokens",
            "fresh model: longest context"),
    FLOAT_KEY("model", "init_std", model.init_std, 0.02, 0, 10, "", "fresh model: init std"),

    INT_KEY("rollout", "n_samples", rollout.n_samples, 4, 1, 1024, "trajectories",
            "trajectories per prompt (one GRPO group)"),
    INT_KEY("rollout", "max_turns", rollout.max_turns, 12, 1, 256, "turns",
            "turns per trajectory at most"),
    INT_KEY("rollout", "max_tokens_per_turn", rollout.max_tokens_per_turn, 4096, 1, E6,
            "tokens", "generated tokens per turn at most; <= max_tokens"),
    INT_KEY("rollout", "max_tokens", rollout.max_tokens, 32768, 16, E7, "tokens",
            "context tokens per trajectory at most"),
    INT_KEY("rollout", "max_inflight_groups", rollout.max_inflight_groups, 0, 0, E6, "groups",
            "groups in flight at most; 0 = derived from the staleness bound"),
    FLOAT_KEY("rollout", "temperature", rollout.temperature, 1.0, 0.01, 100, "",
              "cpu: sampling temperature of training rollouts"),
    FLOAT_KEY("rollout", "top_p", rollout.top_p, 1.0, 0.01, 1, "", "cpu, cuda: nucleus sampling; 1 = off"),
    INT_KEY("rollout", "top_k", rollout.top_k, 0, 0, E6, "tokens", "cpu, cuda: top-k sampling; 0 = off"),
    INT_KEY("rollout", "slots", rollout.slots, 64, 1, 65536, "sequences",
            "cpu: sequences one rollout instance decodes together"),
    INT_KEY("rollout", "sync_buffer", rollout.sync_buffer, 1, 0, 1, "",
            "cuda: 1: a second bf16 copy of the shard on each GPU that only serves rollouts, "
            "which weight syncs (GPU to GPU, or from host memory) land in while decoding "
            "goes on (decoding then waits only for a copy on the GPU); 0: they go "
            "straight into the model at a safe point, decoding waiting for the transfer, "
            "and the KV pool keeps that memory"),
    INT_KEY("rollout", "tool_threads", rollout.tool_threads, 2, 1, 256, "threads",
            "cpu: tool threads per rollout rank"),
    FLOAT_KEY("rollout", "tool_timeout_s", rollout.tool_timeout_s, 5.0, 0.001, 3600, "s",
              "cpu: a tool call running longer returns a timeout"),

    INT_KEY("train", "batch_size", train.batch_size, 32, 1, E6, "trajectories",
            "trajectories per optimizer step; a multiple of rollout.n_samples"),
    INT_KEY("train", "max_staleness", train.max_staleness, 1, 0, 1000, "versions",
            "policy versions a trajectory may lag when it is trained on"),
    INT_KEY("train", "sync_interval", train.sync_interval, 1, 1, E6, "steps",
            "optimizer steps between weight syncs to rollout"),
    INT_KEY("train", "verify_syncs", train.verify_syncs, 0, 0, 1, "",
            "1: every weight sync checked end to end: each receiver's fingerprint of the "
            "weights it got against its senders' of what they sent; a mismatch ends the job "
            "(costs a pass over every member's shard a sync, on device cuda a read of a GPU "
            "receiver's weights)"),
    INT_KEY("train", "sync_side_stream", train.sync_side_stream, 1, 0, 1, "",
            "cuda: 1: a training rank sends a GPU-to-GPU weight sync on a second stream "
            "while its next step's forward and backward run (the update waits for the "
            "sends); 0: on the kernels' stream, the next step waiting for the transfer -- "
            "with rollout.sync_buffer 0 no NCCL communicator then runs beside another"),
    INT_KEY("train", "colocate", train.colocate, 0, 0, 1, "",
            "1: every GPU alternates rollout and training, on-policy, no overlap (verl's "
            "default); needs max_staleness = 0 and a static plan whose n_train equals its "
            "rollout GPUs; device cpu or cuda (every rollout_tp entry equal to train_tp) or "
            "emu (libra-sim or libra)"),
    FLOAT_KEY("train", "lr", train.lr, 5e-5, 0, 10, "", "cpu: AdamW learning rate"),
    FLOAT_KEY("train", "beta1", train.beta1, 0.9, 0, 0.9999, "", "cpu: AdamW beta1"),
    FLOAT_KEY("train", "beta2", train.beta2, 0.95, 0, 0.999999, "", "cpu: AdamW beta2"),
    FLOAT_KEY("train", "weight_decay", train.weight_decay, 0.0, 0, 10, "", "cpu: AdamW weight decay"),
    FLOAT_KEY("train", "clip_norm", train.clip_norm, 1.0, 0, 1e9, "",
              "cpu: global gradient-norm clip; 0 = off"),
    INT_KEY("train", "warmup_steps", train.warmup_steps, 0, 0, E7, "steps",
            "cpu: linear learning-rate warm-up"),
    FLOAT_KEY("train", "clip_low", train.clip_low, 0.2, 0, 1, "", "cpu: PPO clip, lower side"),
    FLOAT_KEY("train", "clip_high", train.clip_high, 0.28, 0, 10, "", "cpu: PPO clip, upper side"),
    FLOAT_KEY("train", "is_cap", train.is_cap, 2.0, 1, 1e6, "",
              "cpu: truncation of the behaviour importance weight"),
    FLOAT_KEY("train", "kl_coef", train.kl_coef, 0.0, 0, 100, "",
              "cpu: k3 KL to the frozen initial model; 0 = off"),
    FLOAT_KEY("train", "entropy_coef", train.entropy_coef, 0.0, 0, 100, "",
              "cpu: entropy bonus; 0 = off"),
    FLOAT_KEY("train", "adv_eps", train.adv_eps, 1e-6, 0, 1, "", "cpu: std floor of advantages"),
    FLOAT_KEY("train", "baseline_decay", train.baseline_decay, 0.9, 0, 0.999999, "",
              "cpu: running baseline of single-sample groups"),
    ENUM_KEY("train", "on_nonfinite", train.on_nonfinite, "stop", "stop, skip",
             "a step whose loss or gradient norm is NaN or infinite is never applied; stop: "
             "the run ends (exit 1) naming the step, the rank and the tensor; skip: the batch "
             "is dropped and counted (nonfinite_skipped)"),

    ENUM_KEY("plan", "mode", plan.mode, "static", "static, schedule, grp",
             "static: one fixed plan; schedule: plan.schedule, one entry per epoch; grp: the "
             "global resource planner chooses (docs/planner.md)"),
    INT_KEY("plan", "interval", plan.interval, 5, 1, E6, "steps", "steps per planning epoch"),
    INT_KEY("plan", "warmup", plan.warmup, 1, 0, E6, "steps",
            "no re-planning before this step (the start-up plan still applies)", GRP_ONLY),
    INT_KEY("plan", "cooldown", plan.cooldown, 1, 0, E6, "steps",
            "steps after a planning pass before a trigger may fire again", GRP_ONLY),
    INT_KEY("plan", "min_history", plan.min_history, 8, 1, E7, "trajectories",
            "finished trajectories needed before re-planning", GRP_ONLY),
    INT_KEY("plan", "history", plan.history, 4096, 1, E7, "trajectories",
            "recent finished trajectories the length profile is drawn from", GRP_ONLY),
    FLOAT_KEY("plan", "queue_pressure", plan.queue_pressure, 0.75, 0, E6, "fraction",
              "trigger: turns waiting / turns in flight", GRP_ONLY),
    FLOAT_KEY("plan", "active_pressure", plan.active_pressure, 0.85, 0, E6, "fraction",
              "trigger: trajectories in flight / the launch cap", GRP_ONLY),
    INT_KEY("plan", "rejected_delta", plan.rejected_delta, 8, 1, E9, "turns",
            "trigger: turns routed past full instances since the last pass", GRP_ONLY),
    FLOAT_KEY("plan", "imbalance", plan.imbalance, 1.25, 1, E6, "ratio",
              "trigger: rollout time / training time per step", GRP_ONLY),
    FLOAT_KEY("plan", "min_gain_ratio", plan.min_gain_ratio, 0.05, 0, 1, "fraction",
              "a new plan must save this share of the predicted step time", GRP_ONLY),
    FLOAT_KEY("plan", "resplit_s", plan.resplit_s, 1.0, 0, E6, "s",
              "fixed cost of a re-split in the transition cost (emulated seconds)", GRP_ONLY),
    INT_KEY("plan", "min_rollout_tp", plan.min_rollout_tp, 1, 1, 8, "",
            "smallest rollout TP degree (a power of two)", GRP_ONLY),
    INT_KEY("plan", "max_rollout_tp", plan.max_rollout_tp, 8, 1, 8, "",
            "largest rollout TP degree (a power of two, <= GPUs per node)", GRP_ONLY),
    INT_KEY("plan", "max_train_tp", plan.max_train_tp, 8, 1, 8, "",
            "largest training TP degree (a power of two)", GRP_ONLY),
    INT_KEY("plan", "max_train_pp", plan.max_train_pp, 1, 1, 64, "",
            "largest training pipeline depth (a power of two)", GRP_ONLY),
    INT_KEY("plan", "max_micro", plan.max_micro, 8, 1, 1024, "sequences",
            "largest micro-batch (a power of two)", GRP_ONLY),
    INT_KEY("plan", "min_train", plan.min_train, 1, 1, 65536, "GPUs",
            "training GPUs at least", GRP_ONLY),
    INT_KEY("plan", "min_rollout", plan.min_rollout, 1, 1, 65536, "GPUs",
            "rollout GPUs at least", GRP_ONLY),
    INT_KEY("plan", "granularity", plan.granularity, 1, 1, 65536, "GPUs",
            "training GPU counts are multiples of this", GRP_ONLY),
    INT_KEY("plan", "max_layouts", plan.max_layouts, 300, 1, E7, "layouts",
            "rollout layouts evaluated exactly per GPU count; beyond, a grid + local search",
            GRP_ONLY),
    FLOAT_KEY("plan", "solve_tolerance", plan.solve_tolerance, 0.005, 0, 0.5, "",
              "the search stops when no candidate left can beat its plan by more than this "
              "fraction (0: the exact optimum)",
              GRP_ONLY),
    INT_KEY("plan", "solve_threads", plan.solve_threads, 0, 0, 16, "threads",
            "threads of one search, evaluating several rollout GPU counts at once (the plan "
            "is the same for any number); 0: the CPUs this process may run on, at most 8",
            GRP_ONLY),
    FLOAT_KEY("plan", "calib_alpha", plan.calib_alpha, 0.1, 0.001, 1, "",
              "calibration: weight of a new measured / predicted ratio", GRP_ONLY),
    FLOAT_KEY("plan", "calib_alpha_fast", plan.calib_alpha_fast, 0.8, 0.001, 1, "",
              "calibration: the weight after a change point", GRP_ONLY),
    FLOAT_KEY("plan", "calib_sigma", plan.calib_sigma, 3.0, 0.5, 100, "std",
              "calibration: a ratio this far from the recent mean is a change point", GRP_ONLY),
    INT_KEY("plan", "calib_window", plan.calib_window, 20, 3, 64, "steps",
            "calibration: ratios kept for the change-point test", GRP_ONLY),
    INT_KEY("plan", "pool", plan.pool, 1, 0, 1, "",
            "elastic hybrid pool: lend rollout GPUs to training as extra replicas", GRP_ONLY),
    FLOAT_KEY("plan", "pool_join_ratio", plan.pool_join_ratio, 1.15, 1, E6, "ratio",
              "pool: lend when training time / rollout time reaches this", GRP_ONLY),
    FLOAT_KEY("plan", "pool_release_ratio", plan.pool_release_ratio, 0.9, 0, 1, "ratio",
              "pool: give back when training time / rollout time falls to this", GRP_ONLY),
    FLOAT_KEY("plan", "pool_release_pressure", plan.pool_release_pressure, 0.8, 0, E6,
              "fraction", "pool: give everything back at once when rollout pressure reaches this",
              GRP_ONLY),
    FLOAT_KEY("plan", "pool_join_timeout_s", plan.pool_join_timeout_s, 180.0, 0.001, E6, "s",
              "pool: a lent replica not ready after this (emulated seconds) goes back to rollout",
              GRP_ONLY),
    INT_KEY("plan", "pool_min_rollout", plan.pool_min_rollout, 0, 0, 65536, "GPUs",
            "pool: rollout GPUs never lent", GRP_ONLY),
    SPEC_INT_KEY("n_train", CFG_GROUP_REQUIRED, n_train, 4, 1, 65536, "training ranks (mode = static)"),
    SPEC_INT_KEY("n_hybrid", 0, n_hybrid, 0, 0, 65536,
                 "rollout ranks lent to training as extra replicas (mode = static)"),
    SPEC_INT_KEY("train_tp", 0, train_tp, 1, 1, 8,
                 "TP degree of a training replica: n_train and n_hybrid are multiples of it "
                 "(mode = static; device cpu and cuda: 1, 2, 4 or 8, one that shards the model)"),
    {.section = "plan", .key = "rollout_tp", .type = CFG_TP_LIST, .flags = CFG_SPEC | CFG_GROUP_REQUIRED,
     .offset = SOFF(rollout_tp), .size = SSZ(rollout_tp), .def_s = "[1, 1, 1, 1]", .min = 1,
     .max = CFG_MAX_TP, .allowed = "1, 2, 4, 8", .units = "ranks",
     .doc = "one rollout instance per entry, its TP degree (mode = static)"},
    {.section = "plan", .key = "schedule", .type = CFG_SCHEDULE, .offset = OFF(plan.schedule),
     .size = SZ(plan.schedule), .def_s = "()", .min = 1, .max = CFG_MAX_SCHEDULE, .units = "",
     .doc = "list of plan groups, epoch e uses entry e % n (mode = schedule)"},

    ENUM_KEY("sched", "type", sched.type, "cmlfq", "cmlfq, load_balance, length_aware, la_mlfq",
             "turn router: cmlfq (predicted remaining length picks the bucket), load_balance, "
             "length_aware (context length picks the bucket), la_mlfq (scouts and demotion)"),
    ENUM_KEY("sched", "balance", sched.balance, "kv", "kv, time, connections, round_robin, weighted",
             "choice among the instances of one TP class: least KV load, least decode time per "
             "token (cost model), fewest connections, "
             "round robin, or weighted by TP degree (weight_tp*)"),
    FLOAT_KEY("sched", "weight_tp1", sched.weights[0], 1.0, 0.01, E6, "",
              "weight of TP-1 instances", WEIGHTED_ONLY),
    FLOAT_KEY("sched", "weight_tp2", sched.weights[1], 1.0, 0.01, E6, "",
              "weight of TP-2 instances", WEIGHTED_ONLY),
    FLOAT_KEY("sched", "weight_tp4", sched.weights[2], 1.0, 0.01, E6, "",
              "weight of TP-4 instances", WEIGHTED_ONLY),
    FLOAT_KEY("sched", "weight_tp8", sched.weights[3], 1.0, 0.01, E6, "",
              "weight of TP-8 instances", WEIGHTED_ONLY),
    FLOAT_KEY("sched", "max_load", sched.max_load, 0.3, 0, E6, "fraction",
              "cap on an instance's KV load / capacity for preferred and fallback routes; "
              "0 = none"),
    INT_KEY("sched", "fallback", sched.fallback, 1, 0, 1, "",
            "1: try the other buckets' TP degrees before the global fallback; 0: go straight "
            "to it"),
    INT_KEY("sched", "affinity", sched.affinity, 1, 0, 1, "",
            "1: keep a trajectory on the instance of its previous turn while it fits",
            ONLY("type", "load_balance, length_aware")),
    {.section = "sched", .key = "buckets", .type = CFG_BUCKETS, .offset = OFF(sched.buckets),
     .size = SZ(sched.buckets), .min = 1, .max = CFG_MAX_BUCKETS, .units = "",
     .doc = "token buckets, ascending max_tokens, each with its TP degrees (see sched.buckets)",
     ONLY("type", "cmlfq, length_aware, la_mlfq")},
    STR_KEY("sched", "default_bucket", CFG_STRING, sched.default_bucket, "", 0,
            SZ(sched.default_bucket) - 1,
            "bucket of a trajectory's first turn (a bucket name); \"\" = placed by the tree",
            CMLFQ_ONLY),
    INT_KEY("sched", "payload_small", sched.payload_small, 500, 0, E9, "tokens",
            "tool returns up to this many tokens are small", CMLFQ_ONLY),
    INT_KEY("sched", "payload_large", sched.payload_large, 5000, 0, E9, "tokens",
            "tool returns from this many tokens on are large; >= payload_small", CMLFQ_ONLY),
    INT_KEY("sched", "window", sched.window, 200, 1, 100000, "samples",
            "samples kept per tree node", CMLFQ_ONLY),
    INT_KEY("sched", "min_samples", sched.min_samples, 8, 1, E6, "samples",
            "support before a tree node may move a trajectory", CMLFQ_ONLY),
    FLOAT_KEY("sched", "shrink", sched.shrink, 4.0, 0, E6, "samples",
              "pseudo-count of the shrinkage prior toward the parent node", CMLFQ_ONLY),
    FLOAT_KEY("sched", "hysteresis", sched.hysteresis, 0.25, 0, 1000, "",
              "a move needs a saving > (1 + hysteresis) x its cost", CMLFQ_ONLY),
    INT_KEY("sched", "max_migrations", sched.max_migrations, 2, 0, 1000, "moves",
            "moves per trajectory at most", CMLFQ_ONLY),
    INT_KEY("sched", "rebuild_interval", sched.rebuild_interval, 50, 0, E7, "steps",
            "steps between tree rebuilds from recent trajectories; 0 = never", CMLFQ_ONLY),
    INT_KEY("sched", "max_recent", sched.max_recent, 5000, 1, E7, "trajectories",
            "recent trajectories kept for the rebuild", CMLFQ_ONLY),
    STR_KEY("sched", "tree_in", CFG_PATH, sched.tree_in, "", 0, CFG_PATH_MAX - 1,
            "tree to start from (a metrics or tree file); \"\" = an empty tree", CMLFQ_ONLY),
    ENUM_KEY("sched", "instance_queue", sched.instance_queue, "mlfq", "fifo, mlfq",
             "order of admission inside an instance: arrival, or multi-level feedback by "
             "generated tokens"),
    INT_KEY("sched", "queue_levels", sched.queue_levels, 4, 1, 8, "levels",
            "levels of the instance queue", MLFQ_QUEUE_ONLY),
    INT_KEY("sched", "queue_base_tokens", sched.queue_base_tokens, 1024, 1, E9, "tokens",
            "generated tokens that end the first level (x4 per level)", MLFQ_QUEUE_ONLY),
    FLOAT_KEY("sched", "queue_age_s", sched.queue_age_s, 30.0, 0, E9, "s",
              "seconds a waiting turn needs to rise one level (emu: emulated seconds); 0 = no "
              "aging", MLFQ_QUEUE_ONLY),
    FLOAT_KEY("sched", "scout_timeout_s", sched.scout_timeout_s, 60.0, 0.001, E9, "s",
              "a held sibling waits this long for its group's scout", ONLY("type", "la_mlfq")),
    INT_KEY("sched", "history_ttl", sched.history_ttl, 5, 0, E7, "steps",
            "steps a prompt's recorded length stays valid", ONLY("type", "la_mlfq")),

    ENUM_KEY("env", "name", env.name, "emu", "emu, calc, search",
             "emu: the workload model (device emu); calc, search: real tools (device cpu)"),
    STR_KEY("env", "prompts", CFG_PATH, env.prompts, "", 0, CFG_PATH_MAX - 1,
            "JSONL problems {\"prompt\": ..., \"answer\": ...}; \"\" = the seeded generator"),
    FLOAT_KEY("env", "max_bad_fraction", env.max_bad_fraction, 0.1, 0, 1, "fraction",
              "env.prompts: lines that cannot be used are reported (file:line) and skipped; "
              "more than this share of them stops the run before it starts; 0 = none allowed"),
    FLOAT_KEY("env", "format_bonus", env.format_bonus, 0.0, 0, 1, "reward",
              "reward of a well-formed but wrong answer"),
    FLOAT_KEY("env", "malformed_call_penalty", env.malformed_call_penalty, 0.0, 0, 1, "reward",
              "subtracted from the reward for every malformed tool call the model made "
              "(bad JSON, another tool's name, no argument; unterminated tags)"),
    INT_KEY("env", "calc_min_steps", env.calc_min_steps, 1, 1, 6, "steps",
            "calc: fewest computation steps per problem"),
    INT_KEY("env", "calc_max_steps", env.calc_max_steps, 3, 1, 6, "steps",
            "calc: most computation steps per problem"),
    INT_KEY("env", "calc_distractors", env.calc_distractors, 1, 0, 4, "numbers",
            "calc: irrelevant numbers per problem at most"),
    INT_KEY("env", "search_entities", env.search_entities, 2000, 10, 100000, "entities",
            "search: people in the generated knowledge base"),
    INT_KEY("env", "search_top_k", env.search_top_k, 3, 1, 20, "passages",
            "search: passages one search returns"),
    INT_KEY("env", "search_max_hops", env.search_max_hops, 3, 1, 3, "hops",
            "search: most hops a question needs"),
    FLOAT_KEY("env", "demo_mistake_rate", env.demo_mistake_rate, 0.5, 0, 1, "fraction",
              "libra sft: share of expert demonstrations with a mistake"),

    INT_KEY("eval", "interval", eval.interval, 10, 0, E7, "steps",
            "steps between evaluations; 0 = only before the first and after the last step"),
    INT_KEY("eval", "size", eval.size, 200, 0, E6, "problems",
            "held-out problems per evaluation; 0 = no evaluation"),

    INT_KEY("sft", "steps", sft.steps, 1000, 1, E7, "steps", "optimizer steps"),
    INT_KEY("sft", "batch_size", sft.batch_size, 32, 1, E6, "demonstrations",
            "demonstrations per step"),
    FLOAT_KEY("sft", "lr", sft.lr, 1e-3, 0, 10, "", "peak learning rate (cosine decay)"),
    INT_KEY("sft", "warmup_steps", sft.warmup_steps, 50, 0, E7, "steps", "linear warm-up"),
    INT_KEY("sft", "eval_interval", sft.eval_interval, 250, 1, E7, "steps",
            "steps between greedy evaluations (and saves)"),
    INT_KEY("sft", "eval_size", sft.eval_size, 200, 0, E6, "problems", "held-out problems per evaluation"),
    STR_KEY("sft", "out", CFG_STRING, sft.out, "sft-model.h5", 1, CFG_PATH_MAX - 1,
            "model file written (relative to the working directory)"),
    STR_KEY("workload", "preset", CFG_PATH, workload.preset, "workloads/r2e-gym.cfg", 1,
            CFG_PATH_MAX - 1, "workload preset (lengths, turns, tools)"),
    STR_KEY("workload", "trace", CFG_PATH, workload.trace, "", 0, CFG_PATH_MAX - 1,
            "a recorded rollout trace (JSONL, docs/emulation.md 4.5) replayed turn by turn "
            "instead of the preset's draws; \"\" = the model"),

    STR_KEY("output", "dir", CFG_STRING, output.dir, "runs", 1, CFG_PATH_MAX - 1,
            "directory for the metrics file (relative to the working directory)"),
    STR_KEY("output", "file", CFG_STRING, output.file, "", 0, CFG_PATH_MAX - 1,
            "metrics file; \"\" = <dir>/<run.name>-<timestamp>.h5"),
    INT_KEY("output", "sample_interval", output.sample_interval, 10, 0, E7, "steps",
            "steps between samples of trained trajectories as text in /samples (real-model "
            "devices); 0 = none"),
    INT_KEY("output", "samples", output.samples, 2, 1, 64, "trajectories",
            "trained trajectories written as text each time"),
    {.section = NULL},
};

#define BOFF(f) offsetof(struct sched_bucket_spec, f)
#define BSZ(f) sizeof(((struct sched_bucket_spec *)0)->f)

const struct cfg_key cfg_bucket_keys[] = {
    {.section = "sched.buckets", .key = "name", .type = CFG_NAME, .offset = BOFF(name),
     .size = BSZ(name), .min = 1, .max = BSZ(name) - 1, .units = "",
     .doc = "the bucket's name, unique (sched.default_bucket and the metrics use it)"},
    {.section = "sched.buckets", .key = "tp", .type = CFG_TP_LIST, .offset = BOFF(tp),
     .size = BSZ(tp), .min = 1, .max = BSZ(tp) / sizeof(int), .allowed = "1, 2, 4, 8",
     .units = "ranks", .doc = "TP degrees of the bucket's instances, in order of preference, "
                              "no repeats"},
    {.section = "sched.buckets", .key = "max_tokens", .type = CFG_INT,
     .offset = BOFF(max_tokens), .size = BSZ(max_tokens), .min = 1, .max = E9,
     .units = "tokens", .doc = "threshold, strictly ascending across buckets (cmlfq: "
                               "remaining decode tokens; length_aware: context tokens; "
                               "la_mlfq: generated tokens before demotion)"},
    {.section = NULL},
};

const struct sched_bucket_spec cfg_default_buckets[] = {
    {.name = "short", .n_tp = 1, .tp = {1}, .max_tokens = 500},
    {.name = "medium", .n_tp = 1, .tp = {2}, .max_tokens = 1000},
    {.name = "long", .n_tp = 2, .tp = {4, 8}, .max_tokens = 30000},
};
const int cfg_n_default_buckets = sizeof cfg_default_buckets / sizeof cfg_default_buckets[0];

const struct cfg_key *cfg_schema_find(const char *section, const char *key)
{
    for (const struct cfg_key *k = cfg_schema; k->section; k++)
        if (strcmp(k->section, section) == 0 && strcmp(k->key, key) == 0) return k;
    return NULL;
}

const char *cfg_type_name(enum cfg_type type)
{
    switch (type) {
    case CFG_INT: return "int";
    case CFG_INT64: return "int64";
    case CFG_FLOAT: return "float";
    case CFG_STRING: return "string";
    case CFG_NAME: return "name";
    case CFG_ENUM: return "enum";
    case CFG_PATH: return "path";
    case CFG_TP_LIST: return "int array";
    case CFG_SCHEDULE:
    case CFG_BUCKETS: return "list of groups";
    }
    return "?";
}

int cfg_list_has(const char *list, const char *value)
{
    size_t n = strlen(value);
    for (const char *p = list; p && *p;) {
        size_t len = strcspn(p, ",");
        if (len == n && strncmp(p, value, n) == 0) return 1;
        p += len;
        while (*p == ',' || *p == ' ') p++;
    }
    return 0;
}

int cfg_allowed_has(const struct cfg_key *k, const char *value)
{
    return cfg_list_has(k->allowed, value);
}

const char *cfg_enum_value(const struct libra_config *cfg, const char *section, const char *name)
{
    const struct cfg_key *k = cfg_schema_find(section, name);
    if (!k || k->type != CFG_ENUM) return "";
    return (const char *)cfg + k->offset;
}

int cfg_key_used(const struct cfg_key *k, const struct libra_config *cfg)
{
    return !k->when || cfg_list_has(k->when_in, cfg_enum_value(cfg, k->section, k->when));
}

void cfg_list_quoted(const char *list, char *buf, size_t n)
{
    size_t len = 0, count = 0;
    buf[0] = '\0';
    for (const char *p = list; *p;) count++, p += strcspn(p, ","), p += strspn(p, ", ");
    size_t i = 0;
    for (const char *p = list; *p && len < n; i++) {
        size_t w = strcspn(p, ",");
        const char *sep = i == 0 ? "" : i + 1 == count ? " or " : ", ";
        len += (size_t)snprintf(buf + len, n - len, "%s\"%.*s\"", sep, (int)w, p);
        p += w;
        p += strspn(p, ", ");
    }
}

void cfg_bucket_tp_text(const struct sched_bucket_spec *b, char *buf, size_t n)
{
    size_t len = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < b->n_tp && len < n; i++)
        len += (size_t)snprintf(buf + len, n - len, "%s%d", i ? ", " : "", b->tp[i]);
    if (len < n) snprintf(buf + len, n - len, "]");
}

void cfg_format_double(double v, char *buf, size_t n)
{
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, n, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    if (isfinite(v) && !strpbrk(buf, ".e")) {
        size_t len = strlen(buf);
        if (len + 3 <= n) memcpy(buf + len, ".0", 3);
    }
}

/* Integers of the table are whole doubles well inside 2^53. */
static void range_numbers(const struct cfg_key *k, char *buf, size_t n)
{
    char lo[32], hi[32];
    if (k->type == CFG_FLOAT) {
        cfg_format_double(k->min, lo, sizeof lo);
        cfg_format_double(k->max, hi, sizeof hi);
    } else {
        snprintf(lo, sizeof lo, "%.0f", k->min);
        snprintf(hi, sizeof hi, "%.0f", k->max);
    }
    if (k->max >= 9e18)
        snprintf(buf, n, ">= %s", lo);
    else
        snprintf(buf, n, "%s .. %s", lo, hi);
}

void cfg_range_text(const struct cfg_key *k, char *buf, size_t n)
{
    switch (k->type) {
    case CFG_INT:
    case CFG_INT64:
    case CFG_FLOAT: range_numbers(k, buf, n); return;
    case CFG_STRING:
        snprintf(buf, n, "%.0f .. %.0f characters", k->min, k->max);
        return;
    case CFG_NAME:
        snprintf(buf, n, "%.0f .. %.0f characters of [A-Za-z0-9_.-]", k->min, k->max);
        return;
    case CFG_ENUM: snprintf(buf, n, "one of %s", k->allowed); return;
    case CFG_PATH:
        snprintf(buf, n, "an existing file%s (see Paths)",
                 (k->flags & CFG_DIR_OK) ? " or directory" : "");
        return;
    case CFG_TP_LIST:
        snprintf(buf, n, "%.0f .. %.0f entries, each %s", k->min, k->max, k->allowed);
        return;
    case CFG_SCHEDULE:
    case CFG_BUCKETS: snprintf(buf, n, "%.0f .. %.0f groups", k->min, k->max); return;
    }
    snprintf(buf, n, "?");
}

void cfg_default_text(const struct cfg_key *k, char *buf, size_t n)
{
    switch (k->type) {
    case CFG_INT:
    case CFG_INT64: snprintf(buf, n, "%.0f", k->def); return;
    case CFG_FLOAT: cfg_format_double(k->def, buf, n); return;
    case CFG_STRING:
    case CFG_NAME:
    case CFG_ENUM:
    case CFG_PATH: snprintf(buf, n, "\"%s\"", k->def_s); return;
    case CFG_TP_LIST:
    case CFG_SCHEDULE: snprintf(buf, n, "%s", k->def_s); return;
    case CFG_BUCKETS: {
        size_t len = (size_t)snprintf(buf, n, "(");
        for (int i = 0; i < cfg_n_default_buckets && len < n; i++) {
            const struct sched_bucket_spec *b = &cfg_default_buckets[i];
            char tp[32];
            cfg_bucket_tp_text(b, tp, sizeof tp);
            len += (size_t)snprintf(buf + len, n - len,
                                    "%s{ name = \"%s\"; tp = %s; max_tokens = %d; }",
                                    i ? ", " : " ", b->name, tp, b->max_tokens);
        }
        if (len < n) snprintf(buf + len, n - len, " )");
        return;
    }
    }
    snprintf(buf, n, "?");
}
