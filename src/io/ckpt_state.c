/*
 * Rank 0's checkpoint state (struct ckpt_state, include/libra/checkpoint.h) in one
 * HDF5 file, state.h5.
 *
 * Layout (format CKPT_FORMAT_VERSION = 1). G groups, T trajectories (the groups'
 * members, group by group), N tokens (the trajectories' tokens, back to back):
 *   root attributes libra_checkpoint_format, step, version, next_prompt, baseline_set,
 *                   reward_ma_n: int64; seed: uint64; baseline, elapsed_s, reward_ma,
 *                   time_to_target_s: double
 *   /relaunch       int64 (n_relaunch)         prompt ids to launch again first
 *   /trained        int64 (n_trained)          prompt ids trained, in order
 *   /groups/prompt_id int64, /groups/launch_version int32, /groups/n int32   (G)
 *   /traj/n_tokens, prompt_tokens, version_start, version_end, turns, tool_calls,
 *         tool_failures, correct: int32; /traj/reward: double                (T)
 *   /traj/ids int32, /traj/mask uint8, /traj/logp float32, /traj/versions int32 (N)
 * Every dataset is 1-D and contiguous, little-endian; empty ones have length 0. The
 * HDF5 file uses the 1.8+ format (checksummed metadata).
 *
 * The HDF5 image is followed by a 24-byte trailer (HDF5 ignores bytes past its end of
 * file; h5py and h5dump read the file as usual): "LIBRACK1", the image length and a
 * 64-bit hash of the image (file_hash()), both uint64 little-endian. Loading checks the
 * trailer before HDF5 parses a byte, so a truncated or overwritten file is rejected
 * up front: HDF5 1.10 leaks memory (and could misread unchecksummed raw data) when
 * handed damaged files. Editing the file with HDF5 tools invalidates the trailer.
 *
 * Saving checks the state with the same rules as loading (a state that would not load
 * is never written), builds the file in memory (libra/h5atomic.h: HDF5 never sees a
 * disk error) and writes it with its trailer to <path>.tmp-<pid>, fsync, rename, fsync
 * of the directory.
 *
 * Loading trusts nothing: the trailer, types, lengths (bounded by the file size before
 * anything is allocated), sums that tie the tables together, value ranges. Any problem
 * gives -1, a message naming the file and the dataset or attribute, and a zeroed
 * struct with nothing allocated. HDF5's automatic error printing is off only during
 * each call. Not thread-safe (HDF5 serial API).
 */
#define _POSIX_C_SOURCE 200809L
#include "libra/checkpoint.h"
#include "libra/errmsg.h"

#include "libra/h5atomic.h"
#include "libra/h5try.h"
#include "libra/h5sum.h"
#include "libra/h5util.h"
#include "libra/log.h"
#include "libra/rng.h"

#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_TRAJ_TOKENS ((int64_t)1 << 24) /* tokens of one trajectory */
#define MAX_GROUP_SIZE ((int64_t)1 << 20)  /* trajectories of one group */

/* ---- errors ---- */


/* ---- the trailer ---- */

#define TRAILER_MAGIC "LIBRACK1"

/* A 64-bit hash of a byte stream fed in pieces whose lengths are multiples of 8 (the
 * last one excepted): each 8 bytes read as a little-endian word go through rng_mix;
 * a last partial word is zero-padded, then the total length is mixed in. */
struct file_hash {
    uint64_t h, len;
};

static uint64_t load_le64(const unsigned char *b)
{
    uint64_t w = 0;
    for (int i = 7; i >= 0; i--) w = w << 8 | b[i];
    return w;
}

static void store_le64(unsigned char *b, uint64_t w)
{
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(w >> (8 * i));
}

static void hash_feed(struct file_hash *fh, const unsigned char *b, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) fh->h = rng_mix(fh->h ^ load_le64(b + i));
    if (i < n) {
        unsigned char last[8] = {0};
        memcpy(last, b + i, n - i);
        fh->h = rng_mix(fh->h ^ load_le64(last));
    }
    fh->len += n;
}

static uint64_t hash_end(const struct file_hash *fh) { return rng_mix(fh->h ^ fh->len); }

void ckpt_state_trailer(unsigned char *t, const unsigned char *image, size_t size)
{
    struct file_hash fh = {0x6c69627261636b70ULL, 0}; /* "librackp" */
    hash_feed(&fh, image, size);
    memcpy(t, TRAILER_MAGIC, 8);
    store_le64(t + 8, size);
    store_le64(t + 16, hash_end(&fh));
}

/*
 * Checks the trailer of path (file_size bytes) against the bytes before it, reading
 * the file in pieces; *image_size is the HDF5 image's length.
 */
static int check_trailer(const char *path, off_t file_size, size_t *image_size, char *err,
                         size_t errlen)
{
    enum { PIECE = 1 << 20 };
    if (file_size < CKPT_STATE_TRAILER_SIZE) {
        errmsg_set(err, errlen, "%s: %lld bytes, too short for a checkpoint state: truncated?",
                   path, (long long)file_size);
        return -1;
    }
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        errmsg_set(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    unsigned char *buf = xmalloc(PIECE), t[CKPT_STATE_TRAILER_SIZE];
    uint64_t size = (uint64_t)file_size - CKPT_STATE_TRAILER_SIZE;
    struct file_hash fh = {0x6c69627261636b70ULL, 0};
    int rc = -1;
    /* Whole pieces (a multiple of 8) until the image ends; then the trailer. */
    for (uint64_t done = 0; done < size + CKPT_STATE_TRAILER_SIZE;) {
        size_t want = done < size ? (size - done < PIECE ? (size_t)(size - done) : PIECE)
                                  : CKPT_STATE_TRAILER_SIZE;
        unsigned char *dst = done < size ? buf : t;
        size_t got = 0;
        while (got < want) {
            ssize_t r = read(fd, dst + got, want - got);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) {
                errmsg_set(err, errlen, "%s: read failed at byte %llu: %s", path,
                           (unsigned long long)(done + got), r < 0 ? strerror(errno)
                                                                  : "unexpected end of file");
                goto out;
            }
            got += (size_t)r;
        }
        if (done < size) hash_feed(&fh, buf, got);
        done += got;
    }
    if (memcmp(t, TRAILER_MAGIC, 8) != 0 || load_le64(t + 8) != size) {
        errmsg_set(err, errlen, "%s: no valid libra trailer at the end of the file (%lld "
                   "bytes): truncated, overwritten, or not written by ckpt_state_save",
                   path, (long long)file_size);
        goto out;
    }
    if (load_le64(t + 16) != hash_end(&fh)) {
        errmsg_set(err, errlen, "%s: the hash of the file does not match its trailer: the "
                   "file is damaged", path);
        goto out;
    }
    *image_size = (size_t)size;
    rc = 0;
out:
    free(buf);
    if (close(fd) != 0 && rc == 0) {
        errmsg_set(err, errlen, "%s: close failed: %s", path, strerror(errno));
        rc = -1;
    }
    return rc;
}

/* ---- validation (shared by save and load) ---- */

/*
 * The rules every stored state obeys; messages name the dataset or attribute the value
 * is stored in. Lengths and sums are checked before this on load (they decide how the
 * flat tables are cut), so here they only guard save against an inconsistent struct.
 */
static int state_check(const struct ckpt_state *s, const char *path, char *err, size_t errlen)
{
#define BAD(...)                                                                      \
    do {                                                                              \
        char what_[384];                                                              \
        snprintf(what_, sizeof what_, __VA_ARGS__);                                   \
        errmsg_set(err, errlen, "%s: %s", path, what_);                                \
        return -1;                                                                    \
    } while (0)
    if (s->step < 0) BAD("attribute step = %d is negative", s->step);
    if (s->version < 0) BAD("attribute version = %d is negative", s->version);
    if (s->next_prompt < 0)
        BAD("attribute next_prompt = %lld is negative", (long long)s->next_prompt);
    if (s->baseline_set != 0 && s->baseline_set != 1)
        BAD("attribute baseline_set = %d is not 0 or 1", s->baseline_set);
    if (s->reward_ma_n < 0) BAD("attribute reward_ma_n = %d is negative", s->reward_ma_n);
    if (!isfinite(s->baseline)) BAD("attribute baseline = %g is not finite", s->baseline);
    if (!isfinite(s->reward_ma)) BAD("attribute reward_ma = %g is not finite", s->reward_ma);
    if (!isfinite(s->elapsed_s) || s->elapsed_s < 0)
        BAD("attribute elapsed_s = %g is not a finite non-negative time", s->elapsed_s);
    if (!isfinite(s->time_to_target_s))
        BAD("attribute time_to_target_s = %g is not finite (< 0 means not reached)",
            s->time_to_target_s);
    if (s->n_relaunch < 0 || (s->n_relaunch > 0 && !s->relaunch))
        BAD("/relaunch: n_relaunch = %lld without data", (long long)s->n_relaunch);
    for (int64_t i = 0; i < s->n_relaunch; i++)
        if (s->relaunch[i] < 0)
            BAD("/relaunch[%lld] = %lld is not a prompt id", (long long)i,
                (long long)s->relaunch[i]);
    if (s->n_trained < 0 || (s->n_trained > 0 && !s->trained))
        BAD("/trained: n_trained = %lld without data", (long long)s->n_trained);
    for (int64_t i = 0; i < s->n_trained; i++)
        if (s->trained[i] < 0)
            BAD("/trained[%lld] = %lld is not a prompt id", (long long)i,
                (long long)s->trained[i]);
    if (s->n_groups < 0 || (s->n_groups > 0 && !s->groups))
        BAD("/groups: n_groups = %lld without data", (long long)s->n_groups);
    for (int64_t g = 0; g < s->n_groups; g++) {
        const struct ckpt_group *gr = &s->groups[g];
        if (gr->prompt_id < 0)
            BAD("/groups/prompt_id[%lld] = %lld is not a prompt id", (long long)g,
                (long long)gr->prompt_id);
        if (gr->launch_version < 0)
            BAD("/groups/launch_version[%lld] = %d is negative", (long long)g,
                gr->launch_version);
        if (gr->n < 0 || gr->n > MAX_GROUP_SIZE || (gr->n > 0 && !gr->t))
            BAD("/groups/n[%lld] = %d is not a group size in [0, %lld] with trajectories",
                (long long)g, gr->n, (long long)MAX_GROUP_SIZE);
        for (int32_t k = 0; k < gr->n; k++) {
            const struct ckpt_traj *t = &gr->t[k];
            char at[96];
            snprintf(at, sizeof at, "(group %lld, trajectory %d)", (long long)g, k);
            if (t->n_tokens < 0 || t->n_tokens > MAX_TRAJ_TOKENS)
                BAD("/traj/n_tokens = %d %s is outside [0, %lld]", t->n_tokens, at,
                    (long long)MAX_TRAJ_TOKENS);
            if (t->prompt_tokens < 0 || t->prompt_tokens > t->n_tokens)
                BAD("/traj/prompt_tokens = %d %s is outside [0, n_tokens = %d]",
                    t->prompt_tokens, at, t->n_tokens);
            if (t->n_tokens > 0 && (!t->ids || !t->mask || !t->logp || !t->versions))
                BAD("/traj/ids %s: %d tokens without token arrays", at, t->n_tokens);
            if (t->version_start < -1 || t->version_end < -1)
                BAD("/traj/version_start, version_end = %d, %d %s: below -1",
                    t->version_start, t->version_end, at);
            if (t->turns < 0 || t->tool_calls < 0 || t->tool_failures < 0)
                BAD("/traj/turns, tool_calls, tool_failures = %d, %d, %d %s: negative count",
                    t->turns, t->tool_calls, t->tool_failures, at);
            if (t->correct != 0 && t->correct != 1)
                BAD("/traj/correct = %d %s is not 0 or 1", t->correct, at);
            if (!isfinite(t->reward)) BAD("/traj/reward = %g %s is not finite", t->reward, at);
            for (int32_t i = 0; i < t->n_tokens; i++) {
                if (t->ids[i] < 0)
                    BAD("/traj/ids = %d %s token %d is not a token id", t->ids[i], at, i);
                if (t->mask[i] > 1)
                    BAD("/traj/mask = %u %s token %d is not 0 or 1", t->mask[i], at, i);
                if (t->versions[i] < -1)
                    BAD("/traj/versions = %d %s token %d is below -1", t->versions[i], at, i);
                if (isnan(t->logp[i])) BAD("/traj/logp %s token %d is NaN", at, i);
            }
        }
    }
    return 0;
#undef BAD
}

/* ---- writing ---- */

static int put_i64(hid_t obj, const char *name, int64_t v, const char *path, char *err,
                   size_t errlen)
{
    return h5_attr_put(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &v, path, err, errlen);
}

static int put_u64(hid_t obj, const char *name, uint64_t v, const char *path, char *err,
                   size_t errlen)
{
    return h5_attr_put(obj, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, &v, path, err, errlen);
}

/* A fixed-length string attribute. */
static int put_str(hid_t obj, const char *name, const char *v, const char *path, char *err,
                   size_t errlen)
{
    hid_t type = H5I_INVALID_HID;
    H5TRY(type = H5Tcopy(H5T_C_S1));
    H5TRY(H5Tset_size(type, strlen(v) + 1));
    int rc = h5_attr_put(obj, name, type, type, v, path, err, errlen);
    H5CLOSE(type, H5Tclose);
    return rc;
fail:
    close_id(&type, H5Tclose);
    return -1;
}

static int put_f64(hid_t obj, const char *name, double v, const char *path, char *err,
                   size_t errlen)
{
    return h5_attr_put(obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &v, path, err, errlen);
}

/* A 1-D contiguous dataset of n elements (n may be 0; data is then not read). */
static int dset_put(hid_t loc, const char *name, hid_t ftype, hid_t mtype, int64_t n,
                    const void *data, const char *path, char *err, size_t errlen)
{
    hid_t space = H5I_INVALID_HID, dset = H5I_INVALID_HID;
    hsize_t dims[1] = {(hsize_t)n};
    H5TRY(space = H5Screate_simple(1, dims, NULL));
    H5TRY(dset = H5Dcreate2(loc, name, ftype, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    if (n > 0) H5TRY(H5Dwrite(dset, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, data));
    if (h5sum_put(dset, data, n > 0 ? (size_t)n * H5Tget_size(mtype) : 0, path, err, errlen))
        goto fail;
    H5CLOSE(dset, H5Dclose);
    H5CLOSE(space, H5Sclose);
    return 0;
fail:
    close_id(&dset, H5Dclose);
    close_id(&space, H5Sclose);
    return -1;
}

/* The flat tables of the file, cut from / into the struct's groups. */
struct flat {
    int64_t G, T, N;
    int64_t *g_prompt;
    int32_t *g_launch, *g_n;
    int32_t *t_int[8]; /* the int32 columns, in traj_int_names order */
    double *t_reward;
    int32_t *ids, *versions;
    uint8_t *mask;
    float *logp;
};

static const char *const traj_int_names[8] = {
    "n_tokens", "prompt_tokens", "version_start", "version_end",
    "turns",    "tool_calls",    "tool_failures", "correct",
};

static void flat_free(struct flat *f)
{
    free(f->g_prompt);
    free(f->g_launch);
    free(f->g_n);
    for (int i = 0; i < 8; i++) free(f->t_int[i]);
    free(f->t_reward);
    free(f->ids);
    free(f->versions);
    free(f->mask);
    free(f->logp);
    memset(f, 0, sizeof *f);
}

static void *alloc_n(int64_t n, size_t elem) { return xmalloc(n > 0 ? (size_t)n * elem : 1); }

/* Flattens a checked state (counts already validated: the sums cannot overflow). */
static void flat_from_state(struct flat *f, const struct ckpt_state *s)
{
    memset(f, 0, sizeof *f);
    f->G = s->n_groups;
    for (int64_t g = 0; g < s->n_groups; g++) {
        f->T += s->groups[g].n;
        for (int32_t k = 0; k < s->groups[g].n; k++) f->N += s->groups[g].t[k].n_tokens;
    }
    f->g_prompt = alloc_n(f->G, sizeof *f->g_prompt);
    f->g_launch = alloc_n(f->G, sizeof *f->g_launch);
    f->g_n = alloc_n(f->G, sizeof *f->g_n);
    for (int i = 0; i < 8; i++) f->t_int[i] = alloc_n(f->T, sizeof(int32_t));
    f->t_reward = alloc_n(f->T, sizeof *f->t_reward);
    f->ids = alloc_n(f->N, sizeof *f->ids);
    f->versions = alloc_n(f->N, sizeof *f->versions);
    f->mask = alloc_n(f->N, sizeof *f->mask);
    f->logp = alloc_n(f->N, sizeof *f->logp);
    int64_t row = 0, tok = 0;
    for (int64_t g = 0; g < s->n_groups; g++) {
        const struct ckpt_group *gr = &s->groups[g];
        f->g_prompt[g] = gr->prompt_id;
        f->g_launch[g] = gr->launch_version;
        f->g_n[g] = gr->n;
        for (int32_t k = 0; k < gr->n; k++, row++) {
            const struct ckpt_traj *t = &gr->t[k];
            const int32_t v[8] = {t->n_tokens,   t->prompt_tokens, t->version_start,
                                  t->version_end, t->turns,        t->tool_calls,
                                  t->tool_failures, t->correct};
            for (int i = 0; i < 8; i++) f->t_int[i][row] = v[i];
            f->t_reward[row] = t->reward;
            size_t n = (size_t)t->n_tokens;
            if (n) {
                memcpy(f->ids + tok, t->ids, n * sizeof *f->ids);
                memcpy(f->versions + tok, t->versions, n * sizeof *f->versions);
                memcpy(f->mask + tok, t->mask, n * sizeof *f->mask);
                memcpy(f->logp + tok, t->logp, n * sizeof *f->logp);
            }
            tok += t->n_tokens;
        }
    }
}

static int write_tables(hid_t file, const struct ckpt_state *s, const struct flat *f,
                        const char *path, char *err, size_t errlen)
{
    hid_t g = H5I_INVALID_HID;
    if (dset_put(file, "relaunch", H5T_STD_I64LE, H5T_NATIVE_INT64, s->n_relaunch, s->relaunch,
                 path, err, errlen) ||
        dset_put(file, "trained", H5T_STD_I64LE, H5T_NATIVE_INT64, s->n_trained, s->trained,
                 path, err, errlen))
        goto fail;
    H5TRY(g = H5Gcreate2(file, "groups", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    if (dset_put(g, "prompt_id", H5T_STD_I64LE, H5T_NATIVE_INT64, f->G, f->g_prompt, path, err,
                 errlen) ||
        dset_put(g, "launch_version", H5T_STD_I32LE, H5T_NATIVE_INT32, f->G, f->g_launch, path,
                 err, errlen) ||
        dset_put(g, "n", H5T_STD_I32LE, H5T_NATIVE_INT32, f->G, f->g_n, path, err, errlen))
        goto fail;
    H5CLOSE(g, H5Gclose);
    H5TRY(g = H5Gcreate2(file, "traj", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    for (int i = 0; i < 8; i++)
        if (dset_put(g, traj_int_names[i], H5T_STD_I32LE, H5T_NATIVE_INT32, f->T, f->t_int[i],
                     path, err, errlen))
            goto fail;
    if (dset_put(g, "reward", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, f->T, f->t_reward, path, err,
                 errlen) ||
        dset_put(g, "ids", H5T_STD_I32LE, H5T_NATIVE_INT32, f->N, f->ids, path, err, errlen) ||
        dset_put(g, "mask", H5T_STD_U8LE, H5T_NATIVE_UINT8, f->N, f->mask, path, err, errlen) ||
        dset_put(g, "logp", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, f->N, f->logp, path, err,
                 errlen) ||
        dset_put(g, "versions", H5T_STD_I32LE, H5T_NATIVE_INT32, f->N, f->versions, path, err,
                 errlen))
        goto fail;
    H5CLOSE(g, H5Gclose);
    return 0;
fail:
    close_id(&g, H5Gclose);
    return -1;
}

static int write_attrs(hid_t file, const struct ckpt_state *s, const char *path, char *err,
                       size_t errlen)
{
    const struct {
        const char *name;
        int64_t v;
    } ints[] = {
        {"libra_checkpoint_format", CKPT_FORMAT_VERSION},
        {"step", s->step},
        {"version", s->version},
        {"next_prompt", s->next_prompt},
        {"baseline_set", s->baseline_set},
        {"reward_ma_n", s->reward_ma_n},
    };
    const struct {
        const char *name;
        double v;
    } dbls[] = {
        {"baseline", s->baseline},
        {"elapsed_s", s->elapsed_s},
        {"reward_ma", s->reward_ma},
        {"time_to_target_s", s->time_to_target_s},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (put_i64(file, ints[i].name, ints[i].v, path, err, errlen)) return -1;
    for (size_t i = 0; i < sizeof dbls / sizeof dbls[0]; i++)
        if (put_f64(file, dbls[i].name, dbls[i].v, path, err, errlen)) return -1;
    if (s->identity[0] && put_str(file, "config_identity", s->identity, path, err, errlen))
        return -1;
    if (s->config && put_str(file, "config_flat", s->config, path, err, errlen)) return -1;
    return put_u64(file, "seed", s->seed, path, err, errlen);
}

int ckpt_state_save(const char *path, const struct ckpt_state *s, char *err, size_t errlen)
{
    if (!path || !*path || !s) {
        errmsg_set(err, errlen, "ckpt_state_save: %s", !s ? "no state" : "empty path");
        return -1;
    }
    if (state_check(s, path, err, errlen)) return -1;
    struct flat f;
    flat_from_state(&f, s);
    struct h5quiet q;
    h5_quiet_begin(&q);
    int rc = -1;
    /* Built in memory, then written atomically with the trailer (libra/h5atomic.h);
     * the 1.8+ format checksums the metadata, a second line of defence behind it. */
    struct h5atomic a;
    hid_t file = h5atomic_create(&a, path, 0, H5F_LIBVER_V18, err, errlen);
    if (file < 0) goto out;
    if (write_attrs(file, s, path, err, errlen) || write_tables(file, s, &f, path, err, errlen))
        goto out;
    if (h5atomic_close_file(&a, err, errlen)) goto out;
    unsigned char trailer[CKPT_STATE_TRAILER_SIZE];
    ckpt_state_trailer(trailer, a.image, a.size);
    rc = h5atomic_commit(&a, trailer, sizeof trailer, err, errlen);
out:
    h5atomic_free(&a);
    flat_free(&f);
    h5_quiet_end(&q);
    return rc;
}

/* ---- reading ---- */

/* Reads a scalar attribute of the given class into mtype (int64 / uint64 / double). */
static int attr_get(hid_t file, const char *name, H5T_class_t want, hid_t mtype, void *out,
                    const char *path, char *err, size_t errlen)
{
    hid_t attr = H5I_INVALID_HID, type = H5I_INVALID_HID, space = H5I_INVALID_HID;
    htri_t has;
    H5TRY(has = H5Aexists(file, name));
    if (!has) {
        errmsg_set(err, errlen, "%s: root attribute %s is missing", path, name);
        goto fail;
    }
    H5TRY(attr = H5Aopen(file, name, H5P_DEFAULT));
    H5TRY(type = H5Aget_type(attr));
    H5TRY(space = H5Aget_space(attr));
    hssize_t np;
    H5TRY(np = H5Sget_simple_extent_npoints(space));
    H5T_class_t cls = H5Tget_class(type);
    size_t fsize = H5Tget_size(type);
    /* An integer must fit int64 (or uint64) without HDF5 clipping it. */
    int fits = cls == want && np == 1 &&
               (want != H5T_INTEGER || fsize < 8 ||
                (fsize == 8 && (H5Tget_sign(type) == H5T_SGN_NONE) ==
                                   (H5Tequal(mtype, H5T_NATIVE_UINT64) > 0)));
    if (!fits) {
        errmsg_set(err, errlen, "%s: root attribute %s is not a scalar %s", path, name,
                   want == H5T_FLOAT ? "float" : "64-bit integer");
        goto fail;
    }
    H5TRY(H5Aread(attr, mtype, out));
    close_id(&space, H5Sclose);
    close_id(&type, H5Tclose);
    close_id(&attr, H5Aclose);
    return 0;
fail:
    close_id(&space, H5Sclose);
    close_id(&type, H5Tclose);
    close_id(&attr, H5Aclose);
    return -1;
}

/* The size (with the NUL) of the fixed-length string attribute name: *size = 0 when
 * the file has none (older files). 0, or -1 when it is not such a string. */
static int str_attr_size(hid_t file, const char *name, size_t *size, const char *path, char *err,
                         size_t errlen)
{
    hid_t attr = H5I_INVALID_HID, type = H5I_INVALID_HID;
    *size = 0;
    htri_t has;
    H5TRY(has = H5Aexists(file, name));
    if (!has) return 0;
    H5TRY(attr = H5Aopen(file, name, H5P_DEFAULT));
    H5TRY(type = H5Aget_type(attr));
    *size = H5Tget_size(type);
    int ok = H5Tget_class(type) == H5T_STRING && !H5Tis_variable_str(type) && *size > 0;
    close_id(&type, H5Tclose);
    close_id(&attr, H5Aclose);
    if (ok) return 0;
    errmsg_set(err, errlen, "%s: root attribute %s is not a fixed-length string", path, name);
    return -1;
fail:
    close_id(&type, H5Tclose);
    close_id(&attr, H5Aclose);
    return -1;
}

/* A string attribute into out (cap bytes); "" when the file has none (older files). */
static int get_str_optional(hid_t file, const char *name, char *out, size_t cap,
                            const char *path, char *err, size_t errlen)
{
    hid_t attr = H5I_INVALID_HID, mem = H5I_INVALID_HID;
    out[0] = '\0';
    size_t size;
    if (str_attr_size(file, name, &size, path, err, errlen)) return -1;
    if (size == 0) return 0;
    if (size > cap) {
        errmsg_set(err, errlen, "%s: root attribute %s is not a string of at most %zu bytes",
                   path, name, cap - 1);
        return -1;
    }
    H5TRY(attr = H5Aopen(file, name, H5P_DEFAULT));
    H5TRY(mem = H5Tcopy(H5T_C_S1));
    H5TRY(H5Tset_size(mem, size));
    H5TRY(H5Aread(attr, mem, out));
    out[size - 1] = '\0';
    close_id(&mem, H5Tclose);
    close_id(&attr, H5Aclose);
    return 0;
fail:
    close_id(&mem, H5Tclose);
    close_id(&attr, H5Aclose);
    return -1;
}

/* A string attribute of up to 1 MiB into a new buffer (*out; NULL when absent). */
static int get_str_alloc(hid_t file, const char *name, char **out, const char *path, char *err,
                         size_t errlen)
{
    size_t size;
    *out = NULL;
    if (str_attr_size(file, name, &size, path, err, errlen)) return -1;
    if (size == 0) return 0;
    if (size > (1u << 20)) {
        errmsg_set(err, errlen, "%s: root attribute %s is longer than 1 MiB", path, name);
        return -1;
    }
    *out = xmalloc(size);
    if (get_str_optional(file, name, *out, size, path, err, errlen) == 0) return 0;
    free(*out);
    *out = NULL;
    return -1;
}

/* An int64 attribute within [lo, hi]. */
static int attr_int(hid_t file, const char *name, int64_t lo, int64_t hi, int64_t *out,
                    const char *path, char *err, size_t errlen)
{
    if (attr_get(file, name, H5T_INTEGER, H5T_NATIVE_INT64, out, path, err, errlen)) return -1;
    if (*out < lo || *out > hi) {
        errmsg_set(err, errlen, "%s: root attribute %s = %lld is outside [%lld, %lld]", path,
                   name, (long long)*out, (long long)lo, (long long)hi);
        return -1;
    }
    return 0;
}

/*
 * Reads the 1-D dataset name (a full path such as "/traj/ids") of class want into a new
 * buffer of *n elements of mtype. Before allocating, its length is bounded by the
 * file: contiguous, unfiltered data of that length must fit in file_size bytes.
 * Integers must fit mtype without clipping. An empty dataset gives *out = NULL.
 */
static int dset_get(hid_t file, const char *name, H5T_class_t want, hid_t mtype, size_t elem,
                    off_t file_size, int64_t *n, void **out, const char *path, char *err,
                    size_t errlen)
{
    hid_t dset = H5I_INVALID_HID, type = H5I_INVALID_HID, space = H5I_INVALID_HID;
    void *buf = NULL;
    *out = NULL;
    *n = 0;
    htri_t has;
    H5TRY(has = H5Lexists(file, name, H5P_DEFAULT));
    if (!has) {
        errmsg_set(err, errlen, "%s: dataset %s is missing", path, name);
        goto fail;
    }
    H5TRY(dset = H5Dopen2(file, name, H5P_DEFAULT));
    H5TRY(type = H5Dget_type(dset));
    H5TRY(space = H5Dget_space(dset));
    int ndim;
    H5TRY(ndim = H5Sget_simple_extent_ndims(space));
    if (ndim != 1) {
        errmsg_set(err, errlen, "%s: dataset %s has %d dimensions, expected 1", path, name,
                   ndim);
        goto fail;
    }
    hsize_t dims[1];
    H5TRY(H5Sget_simple_extent_dims(space, dims, NULL));
    H5T_class_t cls = H5Tget_class(type);
    size_t fsize = H5Tget_size(type);
    int fits = cls == want && fsize > 0;
    if (fits && want == H5T_INTEGER) {
        int fsigned = H5Tget_sign(type) == H5T_SGN_2;
        int msigned = H5Tget_sign(mtype) == H5T_SGN_2;
        fits = fsize < elem ? (fsigned ? msigned : 1)
                            : fsize == elem && fsigned == msigned;
    }
    if (!fits) {
        errmsg_set(err, errlen, "%s: dataset %s has the wrong type (%s of %zu bytes; expected "
                   "%s of %zu)", path, name, cls == H5T_INTEGER ? "integer"
                   : cls == H5T_FLOAT ? "float" : "neither integer nor float", fsize,
                   want == H5T_INTEGER ? "integer" : "float", elem);
        goto fail;
    }
    if (dims[0] > (hsize_t)file_size / fsize) {
        errmsg_set(err, errlen, "%s: dataset %s claims %llu elements, more than the file "
                   "(%lld bytes) can hold: truncated or damaged", path, name,
                   (unsigned long long)dims[0], (long long)file_size);
        goto fail;
    }
    if (dims[0] > 0) {
        buf = xmalloc((size_t)dims[0] * elem);
        H5TRY(H5Dread(dset, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf));
    }
    int checked;
    if (h5sum_check(dset, buf, (size_t)dims[0] * elem, &checked, path, err, errlen)) goto fail;
    close_id(&space, H5Sclose);
    close_id(&type, H5Tclose);
    close_id(&dset, H5Dclose);
    *out = buf;
    *n = (int64_t)dims[0];
    return 0;
fail:
    free(buf);
    close_id(&space, H5Sclose);
    close_id(&type, H5Tclose);
    close_id(&dset, H5Dclose);
    return -1;
}

/* The root attributes into s. */
static int read_attrs(hid_t file, struct ckpt_state *s, const char *path, char *err,
                      size_t errlen)
{
    int64_t v;
    if (attr_int(file, "libra_checkpoint_format", INT64_MIN, INT64_MAX, &v, path, err, errlen))
        return -1;
    if (v != CKPT_FORMAT_VERSION) {
        errmsg_set(err, errlen, "%s: libra_checkpoint_format = %lld, this build reads format %d "
                   "only%s", path, (long long)v, CKPT_FORMAT_VERSION,
                   v > CKPT_FORMAT_VERSION ? " (written by a newer libra?)" : "");
        return -1;
    }
    const struct {
        const char *name;
        int32_t *dst;
    } i32[] = {
        {"step", &s->step},
        {"version", &s->version},
        {"baseline_set", &s->baseline_set},
        {"reward_ma_n", &s->reward_ma_n},
    };
    for (size_t i = 0; i < sizeof i32 / sizeof i32[0]; i++) {
        if (attr_int(file, i32[i].name, INT32_MIN, INT32_MAX, &v, path, err, errlen))
            return -1;
        *i32[i].dst = (int32_t)v;
    }
    if (attr_int(file, "next_prompt", INT64_MIN, INT64_MAX, &s->next_prompt, path, err,
                 errlen))
        return -1;
    const struct {
        const char *name;
        double *dst;
    } dbl[] = {
        {"baseline", &s->baseline},
        {"elapsed_s", &s->elapsed_s},
        {"reward_ma", &s->reward_ma},
        {"time_to_target_s", &s->time_to_target_s},
    };
    for (size_t i = 0; i < sizeof dbl / sizeof dbl[0]; i++)
        if (attr_get(file, dbl[i].name, H5T_FLOAT, H5T_NATIVE_DOUBLE, dbl[i].dst, path, err,
                     errlen))
            return -1;
    if (get_str_optional(file, "config_identity", s->identity, sizeof s->identity, path, err,
                         errlen))
        return -1;
    if (get_str_alloc(file, "config_flat", &s->config, path, err, errlen)) return -1;
    return attr_get(file, "seed", H5T_INTEGER, H5T_NATIVE_UINT64, &s->seed, path, err,
                    errlen);
}

/* Every table of the file into f, with matching lengths within each table. */
static int read_tables(hid_t file, struct ckpt_state *s, struct flat *f, off_t fsz,
                       const char *path, char *err, size_t errlen)
{
    int64_t n;
#define GET(name, cls, mt, ptr, len)                                                        \
    do {                                                                                    \
        void *p_;                                                                           \
        if (dset_get(file, name, cls, mt, sizeof *(ptr), fsz, &n, &p_, path, err, errlen))  \
            return -1;                                                                      \
        (ptr) = p_;                                                                         \
        if ((len) >= 0 && n != (len)) {                                                     \
            errmsg_set(err, errlen, "%s: dataset %s has %lld elements, expected %lld like "  \
                       "the other datasets of its table", path, name, (long long)n,          \
                       (long long)(len));                                                    \
            return -1;                                                                      \
        }                                                                                   \
    } while (0)
    GET("/relaunch", H5T_INTEGER, H5T_NATIVE_INT64, s->relaunch, -1);
    s->n_relaunch = n;
    GET("/trained", H5T_INTEGER, H5T_NATIVE_INT64, s->trained, -1);
    s->n_trained = n;
    GET("/groups/prompt_id", H5T_INTEGER, H5T_NATIVE_INT64, f->g_prompt, -1);
    f->G = n;
    GET("/groups/launch_version", H5T_INTEGER, H5T_NATIVE_INT32, f->g_launch, f->G);
    GET("/groups/n", H5T_INTEGER, H5T_NATIVE_INT32, f->g_n, f->G);
    f->T = -1;
    for (int i = 0; i < 8; i++) {
        char name[64];
        snprintf(name, sizeof name, "/traj/%s", traj_int_names[i]);
        GET(name, H5T_INTEGER, H5T_NATIVE_INT32, f->t_int[i], f->T);
        f->T = n;
    }
    GET("/traj/reward", H5T_FLOAT, H5T_NATIVE_DOUBLE, f->t_reward, f->T);
    GET("/traj/ids", H5T_INTEGER, H5T_NATIVE_INT32, f->ids, -1);
    f->N = n;
    GET("/traj/mask", H5T_INTEGER, H5T_NATIVE_UINT8, f->mask, f->N);
    GET("/traj/logp", H5T_FLOAT, H5T_NATIVE_FLOAT, f->logp, f->N);
    GET("/traj/versions", H5T_INTEGER, H5T_NATIVE_INT32, f->versions, f->N);
    return 0;
#undef GET
}

/* The sums that tie the tables together, checked before the groups are cut out. */
static int check_tables(const struct flat *f, const char *path, char *err, size_t errlen)
{
    int64_t rows = 0, toks = 0;
    for (int64_t g = 0; g < f->G; g++) {
        if (f->g_n[g] < 0 || f->g_n[g] > MAX_GROUP_SIZE) {
            errmsg_set(err, errlen, "%s: /groups/n[%lld] = %d is outside [0, %lld]", path,
                       (long long)g, f->g_n[g], (long long)MAX_GROUP_SIZE);
            return -1;
        }
        rows += f->g_n[g];
    }
    if (rows != f->T) {
        errmsg_set(err, errlen, "%s: /groups/n sums to %lld trajectories but /traj has %lld "
                   "rows", path, (long long)rows, (long long)f->T);
        return -1;
    }
    const int32_t *nt = f->t_int[0], *pt = f->t_int[1];
    for (int64_t t = 0; t < f->T; t++) {
        if (nt[t] < 0 || nt[t] > MAX_TRAJ_TOKENS) {
            errmsg_set(err, errlen, "%s: /traj/n_tokens[%lld] = %d is outside [0, %lld]", path,
                       (long long)t, nt[t], (long long)MAX_TRAJ_TOKENS);
            return -1;
        }
        if (pt[t] < 0 || pt[t] > nt[t]) {
            errmsg_set(err, errlen, "%s: /traj/prompt_tokens[%lld] = %d is outside [0, "
                       "n_tokens = %d]", path, (long long)t, pt[t], nt[t]);
            return -1;
        }
        toks += nt[t];
    }
    if (toks != f->N) {
        errmsg_set(err, errlen, "%s: /traj/n_tokens sums to %lld tokens but /traj/ids has "
                   "%lld", path, (long long)toks, (long long)f->N);
        return -1;
    }
    return 0;
}

static void *copy_n(const void *src, int64_t n, size_t elem)
{
    if (n <= 0) return NULL;
    void *p = xmalloc((size_t)n * elem);
    memcpy(p, src, (size_t)n * elem);
    return p;
}

/* Cuts the checked flat tables into groups of trajectories (each array its own block,
 * so a caller can take ownership of one trajectory's arrays). */
static void groups_from_flat(struct ckpt_state *s, const struct flat *f)
{
    s->n_groups = f->G;
    s->groups = f->G ? xcalloc((size_t)f->G, sizeof *s->groups) : NULL;
    int64_t row = 0, tok = 0;
    for (int64_t g = 0; g < f->G; g++) {
        struct ckpt_group *gr = &s->groups[g];
        gr->prompt_id = f->g_prompt[g];
        gr->launch_version = f->g_launch[g];
        gr->n = f->g_n[g];
        gr->t = gr->n ? xcalloc((size_t)gr->n, sizeof *gr->t) : NULL;
        for (int32_t k = 0; k < gr->n; k++, row++) {
            struct ckpt_traj *t = &gr->t[k];
            int32_t *v[8] = {&t->n_tokens,   &t->prompt_tokens, &t->version_start,
                             &t->version_end, &t->turns,        &t->tool_calls,
                             &t->tool_failures, &t->correct};
            for (int i = 0; i < 8; i++) *v[i] = f->t_int[i][row];
            t->reward = f->t_reward[row];
            t->ids = copy_n(f->ids + tok, t->n_tokens, sizeof *t->ids);
            t->mask = copy_n(f->mask + tok, t->n_tokens, sizeof *t->mask);
            t->logp = copy_n(f->logp + tok, t->n_tokens, sizeof *t->logp);
            t->versions = copy_n(f->versions + tok, t->n_tokens, sizeof *t->versions);
            tok += t->n_tokens;
        }
    }
}

int ckpt_state_load(const char *path, struct ckpt_state *s, char *err, size_t errlen)
{
    struct flat f;
    memset(&f, 0, sizeof f);
    memset(s, 0, sizeof *s);
    if (!path || !*path) {
        errmsg_set(err, errlen, "ckpt_state_load: empty path");
        return -1;
    }
    struct h5quiet q;
    h5_quiet_begin(&q);
    hid_t file = H5I_INVALID_HID;
    struct stat st;
    if (stat(path, &st) != 0) {
        errmsg_set(err, errlen, "%s: cannot read the checkpoint state: %s", path,
                   strerror(errno));
        goto fail;
    }
    size_t image_size;
    if (check_trailer(path, st.st_size, &image_size, err, errlen)) goto fail;
    H5TRY(file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT));
    if (read_attrs(file, s, path, err, errlen)) goto fail;
    if (read_tables(file, s, &f, (off_t)image_size, path, err, errlen)) goto fail;
    H5CLOSE(file, H5Fclose);
    if (check_tables(&f, path, err, errlen)) goto fail;
    groups_from_flat(s, &f);
    flat_free(&f);
    if (state_check(s, path, err, errlen)) goto fail;
    h5_quiet_end(&q);
    return 0;
fail:
    close_id(&file, H5Fclose);
    H5Eclear2(H5E_DEFAULT);
    flat_free(&f);
    ckpt_state_free(s);
    h5_quiet_end(&q);
    return -1;
}

void ckpt_state_free(struct ckpt_state *s)
{
    if (!s) return;
    for (int64_t g = 0; g < s->n_groups && s->groups; g++) {
        struct ckpt_group *gr = &s->groups[g];
        for (int32_t k = 0; k < gr->n && gr->t; k++) {
            free(gr->t[k].ids);
            free(gr->t[k].mask);
            free(gr->t[k].logp);
            free(gr->t[k].versions);
        }
        free(gr->t);
    }
    free(s->groups);
    free(s->relaunch);
    free(s->trained);
    free(s->config);
    memset(s, 0, sizeof *s);
}
