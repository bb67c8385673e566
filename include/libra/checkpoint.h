/*
 * Training checkpoints (DESIGN §9): one directory per checkpoint under a root,
 *
 *   ROOT/step-00000120/model.h5     weights + AdamW state (tfm_save; the training root)
 *   ROOT/step-00000120/state.h5     rank 0's state (struct ckpt_state)
 *   ROOT/step-00000120/COMPLETE     the completion mark, written last
 *
 * Writing is atomic: everything goes into ROOT/step-00000120.tmp/, every file is
 * fsync'ed, the directory is renamed to its final name and fsync'ed in ROOT, then the
 * mark is written (temp file, fsync, rename). A checkpoint without its mark, or
 * whose files fail to load, is incomplete or damaged: it is reported and skipped,
 * never loaded half-way. Older complete checkpoints beyond keep are deleted.
 *
 * The mark is a small text file: "libra checkpoint\nstep N\nversion V\n".
 */
#ifndef LIBRA_CHECKPOINT_H
#define LIBRA_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#define CKPT_FORMAT_VERSION 1

struct libra_config;

/* The checkpoint root of a run: run.checkpoint_dir, or <output.dir>/<run.name>-ckpt. */
void ckpt_root_of(const struct libra_config *cfg, char *out, size_t cap);
/* mkdir -p: every missing component of path, mode 0755. 0, or -1 + message. */
int ckpt_mkdir_p(const char *path, char *err, size_t errlen);

/* One job per checkpoint root (ckpt_lock.c): ROOT/LOCK, made with O_EXCL, holds
 * "host H\npid P\njob J\nrestart R\nstart S\n" (J: $SLURM_JOB_ID or "-", R:
 * $SLURM_RESTART_COUNT or 0, S: the process's start time from /proc, 0 unknown). A lock whose holder is gone -- a pid that no longer exists on this host, or
 * this very Slurm job requeued -- is taken over, and *took_over is set (the caller
 * says so). 0; -1 + a message naming the
 * holder when a live job (or one on another host) holds it. */
int ckpt_lock(const char *root, int *took_over, char *err, size_t errlen);
/* Removes the lock if this process holds it. */
void ckpt_unlock(const char *root);
/* Removes the unfinished checkpoint directories (step-N.tmp) a killed run left under
 * root (call it holding the lock); *removed counts them. 0, or -1 + message. */
int ckpt_clean_tmp(const char *root, int *removed, char *err, size_t errlen);
/* The filesystem of root has room for need bytes (one more checkpoint) for an
 * unprivileged writer (statvfs f_bavail). 0, or -1 + a message with both figures. */
int ckpt_check_space(const char *root, uint64_t need, char *err, size_t errlen);
/* Bytes of one checkpoint of a model of n_params parameters: the weights and the two
 * AdamW moments in float32, plus a margin for the run state (buffered trajectories,
 * the scheduler's tree). */
uint64_t ckpt_estimate_bytes(int64_t n_params);

/* One buffered trajectory (complete, not yet trained on). Arrays have n_tokens
 * entries: token ids, loss mask (1 = model-generated), behaviour log-probs and the
 * policy version of each generated token (-1 elsewhere). */
struct ckpt_traj {
    int32_t n_tokens, prompt_tokens;
    int32_t version_start, version_end;
    int32_t turns, tool_calls, tool_failures, correct;
    double reward;
    int32_t *ids;
    uint8_t *mask;
    float *logp;
    int32_t *versions;
};

/* One complete GRPO group waiting for training. */
struct ckpt_group {
    int64_t prompt_id;
    int32_t launch_version;
    int32_t n;               /* trajectories (n_samples) */
    struct ckpt_traj *t;     /* (n) */
};

/* Rank 0's state. Random streams are counter-based and keyed by (seed, ids), so the
 * seed and the cursors below ARE the random state. */
struct ckpt_state {
    int32_t step, version;
    uint64_t seed;
    int64_t next_prompt;       /* dataset cursor: the next prompt id to launch */
    double baseline;           /* GRPO running baseline (singleton groups) */
    int32_t baseline_set;
    double elapsed_s;          /* wall seconds of training before this checkpoint */
    double reward_ma;          /* moving average of reward (time_to_target_reward) */
    int32_t reward_ma_n;
    double time_to_target_s;   /* < 0: not reached yet */
    int64_t n_relaunch;        /* prompts of groups in flight at the checkpoint: */
    int64_t *relaunch;         /* launched again first on resume */
    int64_t n_groups;          /* buffered complete groups */
    struct ckpt_group *groups;
    int64_t n_trained;         /* prompt ids trained so far, in training order */
    int64_t *trained;
    /* config_identity of the run that started it ("" in checkpoints older than it) */
    char identity[4096];
    /* config_flat of the segment that wrote it (malloc'd; NULL in checkpoints older than
     * it): a resumed run records what it changed */
    char *config;
};

/* ROOT/step-%08d (tmp = 0) or ROOT/step-%08d.tmp (tmp = 1). */
void ckpt_dir_path(const char *root, int step, int tmp, char *out, size_t cap);
/* Creates ROOT (and parents) if needed and a fresh, empty temporary directory for
 * step (removing a stale one). 0, or -1 with a message. */
int ckpt_begin(const char *root, int step, char *err, size_t errlen);
/* fsyncs the files of the temporary directory, renames it into place, writes the
 * mark; then deletes older complete checkpoints beyond the newest keep (keep >= 1). */
int ckpt_commit(const char *root, int step, int version, int keep, char *err, size_t errlen);

int ckpt_state_save(const char *path, const struct ckpt_state *s, char *err, size_t errlen);
/* Allocates and fills s; on error nothing is left allocated. */
int ckpt_state_load(const char *path, struct ckpt_state *s, char *err, size_t errlen);
/* The 24-byte trailer ckpt_state_save appends to an HDF5 image of size bytes (magic,
 * length, hash of the image); ckpt_state_load refuses a file whose trailer differs.
 * For tools that build or mutate state files (the fuzz target). */
#define CKPT_STATE_TRAILER_SIZE 24
void ckpt_state_trailer(unsigned char *t, const unsigned char *image, size_t size);
void ckpt_state_free(struct ckpt_state *s);

/* Checkpoints under ROOT that have a mark, newest first: fills steps (capacity max)
 * and returns the count (0 if ROOT does not exist). Incomplete ones (no mark, or a
 * .tmp directory) are reported with LOG_W and not listed. */
int ckpt_list(const char *root, int *steps, int max);
/* Loads the newest complete checkpoint whose state.h5 AND model.h5 both load: the
 * state into s and the file path of its model into model_path. A damaged one is
 * reported (LOG_W, with the reason) and the next older is tried. Returns its step,
 * or -1 if there is none (err says why). The model file itself is loaded by the
 * caller (tfm_load), which has already been proven to work on it. */
int ckpt_load_latest(const char *root, struct ckpt_state *s, char *model_path, size_t cap,
                     char *err, size_t errlen);

#endif
