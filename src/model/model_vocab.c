/*
 * Choosing the model's vocabulary and format (include/libra/model_vocab.h).
 */
#include "libra/model_vocab.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "libra/chat.h"
#include "libra/format_chat.h"
#include "libra/hf_model.h"
#include "libra/log.h"
#include "libra/model_load.h"
#include "libra/tfm_io.h"
#include "libra/tokenizer.h"

static int is_dir(const char *path)
{
    struct stat st;
    return path[0] && stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int has_file(const char *dir, const char *name)
{
    char p[PATH_MAX + 32];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* The Hugging Face directory behind the checkpoint into hf (PATH_MAX bytes): the
 * checkpoint itself, or the one an HDF5 model file (or run checkpoint) was first
 * imported from (its TFM_TAG_HF_SOURCE); "" for libra's own models. */
static int hf_dir_of(const char *checkpoint, char *hf, char *err, size_t errlen)
{
    hf[0] = '\0';
    if (!checkpoint[0]) return 0;
    char *resolved = xmalloc(PATH_MAX), e[1024];
    int rc = 0, format = model_probe(checkpoint, resolved, e, sizeof e);
    if (format == MODEL_HF) {
        snprintf(hf, PATH_MAX, "%s", is_dir(resolved) ? resolved : checkpoint);
    } else if (format == MODEL_HDF5) {
        if (tfm_read_tag(resolved, TFM_TAG_HF_SOURCE, hf, PATH_MAX, e, sizeof e) < 0)
            hf[0] = '\0';
        if (hf[0] && !is_dir(hf)) hf[0] = '\0'; /* moved away: the format must be named */
    } else {
        snprintf(err, errlen, "model.checkpoint: %s", e);
        rc = -1;
    }
    free(resolved);
    return rc;
}

/* The chat family of the configured format, or of the Hugging Face model hf for
 * "auto"; 0 = the libra tag format; -1 on error. */
static int family_of(const struct model_config *m, const char *hf, char *err, size_t errlen)
{
    if (strcmp(m->chat_format, "libra") == 0) return 0;
    if (strcmp(m->chat_format, "qwen3") == 0) return CHAT_QWEN3;
    if (strcmp(m->chat_format, "llama3") == 0) return CHAT_LLAMA3;
    if (!hf[0]) return 0; /* auto: libra's own models */
    struct tfm_config c;
    char e[1024];
    if (hf_config_read(hf, &c, NULL, e, sizeof e)) {
        snprintf(err, errlen, "model.checkpoint: %s", e);
        return -1;
    }
    return c.family == TFM_LLAMA ? CHAT_LLAMA3 : CHAT_QWEN3;
}

static const struct vocab *open_format(const struct model_config *m, int family,
                                       const char *tok, int hf, char *err, size_t errlen);

const struct vocab *model_vocab_open(const struct model_config *m, char *err, size_t errlen)
{
    char *hf = xmalloc(PATH_MAX);
    if (hf_dir_of(m->checkpoint, hf, err, errlen)) {
        free(hf);
        return NULL;
    }
    const struct vocab *v = NULL;
    const char *tok = m->tokenizer[0]                         ? m->tokenizer
                      : hf[0] && has_file(hf, "tokenizer.json") ? hf
                                                                : "";
    int family = family_of(m, hf, err, errlen);
    if (family >= 0) v = open_format(m, family, tok, hf[0] != 0, err, errlen);
    free(hf);
    return v;
}

/* The vocabulary of family (0 = libra tags) over the tokenizer tok ("" = none). */
static const struct vocab *open_format(const struct model_config *m, int family,
                                       const char *tok, int hf, char *err, size_t errlen)
{
    if (family == 0) {
        if (m->tokenizer[0]) {
            snprintf(err, errlen, "model.chat_format = %s: the libra tag format is the "
                     "byte-level models' and %s is a BPE tokenizer (set model.chat_format = "
                     "\"qwen3\" or \"llama3\", or leave model.tokenizer empty)",
                     m->chat_format, m->tokenizer);
            return NULL;
        }
        return tok_byte_vocab();
    }
    if (!tok[0]) {
        snprintf(err, errlen, "model.chat_format = %s needs the model's tokenizer.json: %s "
                 "(set model.tokenizer to a tokenizer.json or the directory holding one)",
                 chat_family_name(family),
                 hf ? "the checkpoint directory has none" : "model.tokenizer is empty");
        return NULL;
    }
    char e[1024];
    struct vocab *v = format_chat_open(tok, family, m->enable_thinking, e, sizeof e);
    if (!v) snprintf(err, errlen, "model.tokenizer: %s", e);
    return v;
}

void model_vocab_close(const struct vocab *v)
{
    if (!v || v == tok_byte_vocab()) return;
    format_chat_close((struct vocab *)v);
}
