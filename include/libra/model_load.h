/*
 * One loader for every model the run, the commands and libra export accept:
 *   - an HDF5 model file (libra/tfm_io.h: model.checkpoint, sft.out, a checkpoint's
 *     model.h5), optimizer state included when asked for;
 *   - a run checkpoint directory (ROOT/step-N: its model.h5);
 *   - a Hugging Face directory (config.json + model.safetensors or its shards:
 *     libra/hf_model.h), or the path of its config.json; no optimizer state.
 * Anything else is an error that says which of these was expected.
 */
#ifndef LIBRA_MODEL_LOAD_H
#define LIBRA_MODEL_LOAD_H

#include <limits.h>
#include <stddef.h>

#include "libra/adamw.h"
#include "libra/tfm.h"

#ifndef PATH_MAX
#define PATH_MAX 4096
#endif

enum model_format { MODEL_HDF5 = 1, MODEL_HF = 2 };

struct model_source {
    int format;                /* enum model_format */
    char file[PATH_MAX];       /* what was read: the HDF5 file, or the HF directory */
    char hf_dir[PATH_MAX];     /* the Hugging Face directory the weights came from: the
                                * directory loaded (absolute), or the HDF5 file's
                                * TFM_TAG_HF_SOURCE tag; "" when unknown */
    char run_name[256];        /* the HDF5 file's TFM_TAG_RUN_NAME tag, "" if none */
};

/* The format of path without loading it (0 with a message when it is neither);
 * resolved (may be NULL, PATH_MAX bytes) gets the file or directory to read. */
int model_probe(const char *path, char *resolved, char *err, size_t errlen);
/* Loads path into c and p (allocated) and, for an HDF5 file with optimizer state and
 * opt != NULL, opt (like tfm_load; zeroed otherwise). src (may be NULL) says what was
 * loaded. 0, or -1 with a message naming the path; nothing left allocated on error. */
int model_load(const char *path, struct tfm_config *c, struct tfm_params *p, struct adamw *opt,
               struct model_source *src, char *err, size_t errlen);

#endif
