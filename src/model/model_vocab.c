/*
 * Choosing the model's vocabulary and format (include/libra/model_vocab.h).
 */
#include "libra/model_vocab.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "libra/chat.h"
#include "libra/format_chat.h"
#include "libra/hf_model.h"
#include "libra/tokenizer.h"

static int is_dir(const char *path)
{
    struct stat st;
    return path[0] && stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int has_file(const char *dir, const char *name)
{
    char p[4200];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* The chat family of the configured format, or of the checkpoint for "auto";
 * 0 = the libra tag format; -1 on error. */
static int family_of(const struct model_config *m, int hf, char *err, size_t errlen)
{
    if (strcmp(m->chat_format, "libra") == 0) return 0;
    if (strcmp(m->chat_format, "qwen3") == 0) return CHAT_QWEN3;
    if (strcmp(m->chat_format, "llama3") == 0) return CHAT_LLAMA3;
    if (!hf) return 0; /* auto: libra's own models */
    struct tfm_config c;
    char e[512];
    if (hf_config_read(m->checkpoint, &c, NULL, e, sizeof e)) {
        snprintf(err, errlen, "model.checkpoint: %s", e);
        return -1;
    }
    return c.family == TFM_LLAMA ? CHAT_LLAMA3 : CHAT_QWEN3;
}

const struct vocab *model_vocab_open(const struct model_config *m, char *err, size_t errlen)
{
    int hf = is_dir(m->checkpoint);
    const char *tok = m->tokenizer[0]                              ? m->tokenizer
                      : hf && has_file(m->checkpoint, "tokenizer.json") ? m->checkpoint
                                                                      : "";
    int family = family_of(m, hf, err, errlen);
    if (family < 0) return NULL;
    if (family == 0) {
        if (tok[0]) {
            snprintf(err, errlen, "model.chat_format = %s: the libra tag format is the "
                     "byte-level models' and %s is a BPE tokenizer (set model.chat_format = "
                     "\"qwen3\" or \"llama3\", or leave model.tokenizer empty)",
                     m->chat_format, tok);
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
