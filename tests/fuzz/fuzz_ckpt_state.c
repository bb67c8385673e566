/* Fuzz target: a checkpoint's run state (state.h5: HDF5 image + trailer;
 * src/io/ckpt_state.c). The input is taken as the HDF5 image and sealed with a valid
 * trailer, so the fuzzer gets past the trailer check to the HDF5 reading and the
 * loader's own checks of every array. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "libra/checkpoint.h"

/* LIBRA_FUZZ_SEED_DIR set (tools/fuzz, before the first run): a small valid state --
 * one group of two trajectories, a relaunch, trained prompts, an identity -- saved by
 * ckpt_state_save, its HDF5 image (the trailer cut off) written there as the seed. */
static void write_seed(const char *dir)
{
    int32_t ids[4] = {1, 2, 3, 4}, ver[4] = {-1, -1, 0, 0};
    uint8_t mask[4] = {0, 0, 1, 1};
    float logp[4] = {0, 0, -0.5f, -1.25f};
    struct ckpt_traj t[2];
    for (int i = 0; i < 2; i++)
        t[i] = (struct ckpt_traj){4, 2, 0, 0, 1, 1, 0, i, 0.5 * i, ids, mask, logp, ver};
    struct ckpt_group g = {7, 0, 2, t};
    int64_t relaunch[1] = {9}, trained[3] = {0, 1, 2};
    static struct ckpt_state s;
    s.step = 3;
    s.version = 3;
    s.seed = 7;
    s.next_prompt = 10;
    s.time_to_target_s = -1;
    s.n_relaunch = 1;
    s.relaunch = relaunch;
    s.n_groups = 1;
    s.groups = &g;
    s.n_trained = 3;
    s.trained = trained;
    snprintf(s.identity, sizeof s.identity, "model.checkpoint = m.h5\n");
    char path[4200], err[1024];
    snprintf(path, sizeof path, "%s/state-seed.h5.tmp", dir);
    if (ckpt_state_save(path, &s, err, sizeof err) != 0) {
        fprintf(stderr, "fuzz_ckpt_state: %s\n", err);
        exit(1);
    }
    FILE *f = fopen(path, "rb");
    static uint8_t buf[1 << 20];
    size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f) fclose(f);
    remove(path);
    if (n <= CKPT_STATE_TRAILER_SIZE || n == sizeof buf) exit(1);
    snprintf(path, sizeof path, "%s/state-seed", dir);
    f = fopen(path, "wb");
    if (!f || fwrite(buf, 1, n - CKPT_STATE_TRAILER_SIZE, f) != n - CKPT_STATE_TRAILER_SIZE)
        exit(1);
    fclose(f);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *dir = getenv("LIBRA_FUZZ_SEED_DIR");
    if (dir) write_seed(dir);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size + CKPT_STATE_TRAILER_SIZE);
    if (!buf) return 0;
    if (size) memcpy(buf, data, size);
    ckpt_state_trailer(buf + size, buf, size);
    const char *path = fuzz_file(buf, size + CKPT_STATE_TRAILER_SIZE, ".h5");
    free(buf);
    struct ckpt_state s;
    char err[1024];
    if (ckpt_state_load(path, &s, err, sizeof err) == 0) ckpt_state_free(&s);
    return 0;
}
