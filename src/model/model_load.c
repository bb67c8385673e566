/*
 * model_load (include/libra/model_load.h): recognises an HDF5 model file, a run
 * checkpoint directory or a Hugging Face directory and hands it to tfm_load or
 * hf_load. Recognition is by content, not by name: an HDF5 signature, a directory
 * with config.json (Hugging Face) or model.h5 (checkpoint).
 */
#define _XOPEN_SOURCE 700 /* realpath */
#include "libra/model_load.h"
#include "libra/errmsg.h"

#include "libra/hf_model.h"
#include "libra/tfm_io.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int is_file(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* HDF5's signature at offset 0 (where libra and h5py write it). */
static int has_h5_signature(const char *p)
{
    static const unsigned char sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
    unsigned char buf[8];
    FILE *f = fopen(p, "rb");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    return n == sizeof buf && memcmp(buf, sig, sizeof sig) == 0;
}

int model_probe(const char *path, char *resolved, char *err, size_t errlen)
{
    char buf[PATH_MAX];
    struct stat st;
    if (!resolved) resolved = buf;
    if (stat(path, &st) != 0) {
        errmsg_set(err, errlen, "%s: %s", path, strerror(errno));
        return 0;
    }
    if (S_ISDIR(st.st_mode)) {
        char p[PATH_MAX];
        int n = snprintf(p, sizeof p, "%s/%s", path, HF_CONFIG_NAME);
        if (n > 0 && (size_t)n < sizeof p && is_file(p)) {
            snprintf(resolved, PATH_MAX, "%s", path);
            return MODEL_HF;
        }
        n = snprintf(p, sizeof p, "%s/model.h5", path);
        if (n > 0 && (size_t)n < sizeof p && is_file(p)) {
            snprintf(resolved, PATH_MAX, "%s", p);
            return MODEL_HDF5;
        }
        errmsg_set(err, errlen, "%s: a directory with neither config.json (a Hugging Face "
                   "model) nor model.h5 (a run checkpoint)", path);
        return 0;
    }
    if (S_ISREG(st.st_mode)) {
        if (has_h5_signature(path)) {
            snprintf(resolved, PATH_MAX, "%s", path);
            return MODEL_HDF5;
        }
        const char *base = strrchr(path, '/');
        base = base ? base + 1 : path;
        if (strcmp(base, HF_CONFIG_NAME) == 0) { /* .../config.json: its directory */
            size_t dl = (size_t)(base - path);
            if (dl == 0) snprintf(resolved, PATH_MAX, ".");
            else snprintf(resolved, PATH_MAX, "%.*s", (int)(dl > 1 ? dl - 1 : 1), path);
            return MODEL_HF;
        }
        errmsg_set(err, errlen, "%s: not an HDF5 file (%lld bytes; no HDF5 signature) and not a "
                   "Hugging Face directory (config.json + *.safetensors)", path,
                   (long long)st.st_size);
        return 0;
    }
    errmsg_set(err, errlen, "%s: neither a model file nor a directory", path);
    return 0;
}

int model_load(const char *path, struct tfm_config *c, struct tfm_params *p, struct adamw *opt,
               struct model_source *src, char *err, size_t errlen)
{
    char resolved[PATH_MAX];
    struct model_source local;
    if (!src) src = &local;
    memset(src, 0, sizeof *src);
    memset(p, 0, sizeof *p);
    if (opt) memset(opt, 0, sizeof *opt);
    int fmt = model_probe(path, resolved, err, errlen);
    if (!fmt) return -1;
    src->format = fmt;
    snprintf(src->file, sizeof src->file, "%s", resolved);
    if (fmt == MODEL_HF) {
        if (hf_load(resolved, c, p, err, errlen)) return -1;
        if (!realpath(resolved, src->hf_dir)) snprintf(src->hf_dir, sizeof src->hf_dir, "%s",
                                                       resolved);
        return 0;
    }
    if (tfm_load(resolved, c, p, opt, err, errlen)) return -1;
    char e[256];
    if (tfm_read_tag(resolved, TFM_TAG_HF_SOURCE, src->hf_dir, sizeof src->hf_dir, e,
                     sizeof e) < 0 ||
        tfm_read_tag(resolved, TFM_TAG_RUN_NAME, src->run_name, sizeof src->run_name, e,
                     sizeof e) < 0) {
        src->hf_dir[0] = src->run_name[0] = '\0'; /* provenance is optional */
    }
    return 0;
}
