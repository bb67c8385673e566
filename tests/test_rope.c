/*
 * The rotary table (src/model/rope.c) against Hugging Face's: tests/golden/rope.txt
 * holds, per case (default, linear, llama3, yarn; written by tools/torch-reference.py
 * --rope-golden with torch, float32 as transformers computes it), the inverse
 * frequencies, the attention scaling and the cos | sin rows of a few positions up to
 * 131071. Also: the default table is bitwise the formula libra used before rope_scaling
 * existed, rope_same sees every field, and tfm_config_check's rope_scaling messages.
 *
 * Tolerances. inv_freq: 1e-6 relative (the float32 steps are HF's, so they agree to
 * the bit except where powf and torch's vectorised pow round theta^(2i/D) differently:
 * 1 ulp, ~1e-7). Table entries: |c - g| <= a (1e-6 + 2^-23 |p w_i|), a the scaling: a
 * 1-ulp difference in w_i moves the angle p w_i by 2^-23 of itself (up to ~5e-6 at
 * position 131071 on a high frequency), and float32 cos / sin differ from double ones
 * rounded to float by an ulp.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/model/rope.h"
#include "libra/tfm.h"
#include "testutil.h"

/* A valid tiny model around the rotary settings under test. */
static struct tfm_config base_config(int D, float theta, int max_pos)
{
    return (struct tfm_config){.family = TFM_LLAMA, .vocab_size = 16, .hidden_size = 8,
                               .n_layers = 1, .n_heads = 2, .n_kv_heads = 1, .head_dim = D,
                               .intermediate_size = 8, .max_position_embeddings = max_pos,
                               .rms_norm_eps = 1e-6f, .rope_theta = theta};
}

/* ---------------------------------------------------------------- golden */

enum { LINE_MAX_CHARS = 1 << 15, MAX_POS_ROWS = 16 };

struct golden_case {
    char name[64];
    struct tfm_config c;
    int n_pos;
    float scale;
    float inv_freq[256];                /* (D/2) */
    int pos[MAX_POS_ROWS];
    float rows[MAX_POS_ROWS][512];      /* (n_pos, D) cos | sin */
};

/* Reads n floats from the rest of a line (strtof: the %.9g text is the float32). */
static int read_floats(char *s, float *out, int n)
{
    for (int i = 0; i < n; i++) {
        char *end;
        out[i] = strtof(s, &end);
        if (end == s) return -1;
        s = end;
    }
    return 0;
}

/* The next case of f into g; 0, or -1 at the end of the file. */
static int read_case(FILE *f, char *line, struct golden_case *g)
{
    memset(g, 0, sizeof *g);
    while (fgets(line, LINE_MAX_CHARS, f))
        if (strncmp(line, "case ", 5) == 0) break;
    if (feof(f)) return -1;
    char kind[16];
    int D, max_pos, orig, n;
    float theta, factor, low, high, bf, bs, att;
    int got = sscanf(line, "case %63s %d %g %d %15s %g %g %g %d %g %g %g %d", g->name, &D, &theta,
                     &max_pos, kind, &factor, &low, &high, &orig, &bf, &bs, &att, &n);
    CU_ASSERT_FATAL(got == 13 && D > 0 && D <= 256 && n > 0 && n <= MAX_POS_ROWS);
    g->c = base_config(D, theta, max_pos);
    g->c.rope_type = tfm_rope_type_from_name(kind);
    CU_ASSERT_FATAL(g->c.rope_type >= 0);
    g->c.rope_factor = factor;
    g->c.rope_low_freq_factor = low;
    g->c.rope_high_freq_factor = high;
    g->c.rope_original_max_pos = orig;
    g->c.rope_beta_fast = bf;
    g->c.rope_beta_slow = bs;
    g->c.rope_attention_factor = att;
    g->n_pos = n;
    CU_ASSERT_FATAL(fgets(line, LINE_MAX_CHARS, f) && sscanf(line, "scale %g", &g->scale) == 1);
    CU_ASSERT_FATAL(fgets(line, LINE_MAX_CHARS, f) && strncmp(line, "inv_freq ", 9) == 0);
    CU_ASSERT_FATAL(read_floats(line + 9, g->inv_freq, D / 2) == 0);
    for (int r = 0; r < n; r++) {
        char *end;
        CU_ASSERT_FATAL(fgets(line, LINE_MAX_CHARS, f) && strncmp(line, "pos ", 4) == 0);
        g->pos[r] = (int)strtol(line + 4, &end, 10);
        CU_ASSERT_FATAL(g->pos[r] >= 0 && read_floats(end, g->rows[r], D) == 0);
    }
    return 0;
}

static void test_golden_tables(void)
{
    FILE *f = fopen(test_path("tests/golden/rope.txt"), "r");
    CU_ASSERT_FATAL(f != NULL);
    char *line = malloc(LINE_MAX_CHARS);
    static struct golden_case g;
    int n_cases = 0, types_seen = 0;
    while (read_case(f, line, &g) == 0) {
        const struct tfm_config *c = &g.c;
        char err[256];
        int D = c->head_dim, half = D / 2;
        if (tfm_config_check(c, err, sizeof err) != 0) {
            fprintf(stderr, "\n  %s: %s\n", g.name, err);
            CU_FAIL("a golden case's config is invalid");
            continue;
        }
        n_cases++;
        types_seen |= 1 << c->rope_type;
        float w[128];
        float a = rope_inv_freq(w, c);
        CU_ASSERT_EQUAL(a, g.scale);
        double worst_w = 0, worst_t = 0;
        for (int i = 0; i < half; i++) {
            double e = fabs((double)w[i] - g.inv_freq[i]) / g.inv_freq[i];
            worst_w = fmax(worst_w, e);
        }
        CU_ASSERT(worst_w <= 1e-6);
        int n_pos = g.pos[g.n_pos - 1] + 1;
        float *t = malloc(sizeof(float) * (size_t)n_pos * D);
        rope_table(t, n_pos, c);
        for (int r = 0; r < g.n_pos; r++) {
            const float *row = t + (size_t)g.pos[r] * D;
            for (int j = 0; j < D; j++) {
                double ang = (double)g.pos[r] * g.inv_freq[j % half];
                double tol = g.scale * (1e-6 + ang * 0x1p-23);
                double e = fabs((double)row[j] - g.rows[r][j]);
                worst_t = fmax(worst_t, e / tol);
                if (e > tol)
                    fprintf(stderr, "\n  %s: position %d, entry %d: %.9g, HF %.9g\n", g.name,
                            g.pos[r], j, (double)row[j], (double)g.rows[r][j]);
            }
        }
        CU_ASSERT(worst_t <= 1.0);
        printf("\n    %-22s inv_freq worst %.1e relative, table worst %.2f of tolerance",
               g.name, worst_w, worst_t);
        free(t);
    }
    printf("\n  ");
    CU_ASSERT(n_cases == 8);
    CU_ASSERT(types_seen == 0xf); /* default, linear, llama3, yarn */
    free(line);
    fclose(f);
}

/* ---------------------------------------------------------------- invariants */

/* The default table is bitwise the formula before rope_scaling (models and goldens
 * of earlier versions rotate exactly as before); a linear factor is a stretch of the
 * positions: linear(factor 4) at 4p equals default at p, to float rounding. */
static void test_default_and_linear(void)
{
    enum { D = 16, N = 64 };
    struct tfm_config c = base_config(D, 10000.0f, 4 * N);
    static float t[4 * N * D], ref[N * D];
    rope_table(t, N, &c);
    for (int i = 0; i < D / 2; i++) {
        float inv = 1.0f / powf(10000.0f, (float)(2 * i) / (float)D);
        for (int p = 0; p < N; p++) {
            float a = (float)p * inv;
            ref[p * D + i] = (float)cos((double)a);
            ref[p * D + D / 2 + i] = (float)sin((double)a);
        }
    }
    CU_ASSERT_EQUAL(memcmp(t, ref, sizeof ref), 0);
    c.rope_type = TFM_ROPE_LINEAR;
    c.rope_factor = 4;
    rope_table(t, 4 * N, &c);
    for (int p = 0; p < N; p++)
        for (int j = 0; j < D; j++) CU_ASSERT_DOUBLE_EQUAL(t[4 * p * D + j], ref[p * D + j], 2e-6);
}

/* llama3: the high frequencies are untouched, the low ones divided by the factor,
 * and the band between is a smooth blend (monotone in i, between the two). */
static void test_llama3_bands(void)
{
    struct tfm_config c = base_config(128, 500000.0f, 131072);
    float w0[64], w[64];
    rope_inv_freq(w0, &c);
    c.rope_type = TFM_ROPE_LLAMA3;
    c.rope_factor = 8;
    c.rope_low_freq_factor = 1;
    c.rope_high_freq_factor = 4;
    c.rope_original_max_pos = 8192;
    rope_inv_freq(w, &c);
    int hi = 0, lo = 0, mid = 0;
    for (int i = 0; i < 64; i++) {
        double lambda = 2 * 3.14159265358979 / w0[i];
        if (lambda < 8192 / 4.0) {
            CU_ASSERT_EQUAL(w[i], w0[i]);
            hi++;
        } else if (lambda > 8192 / 1.0) {
            CU_ASSERT_EQUAL(w[i], w0[i] / 8);
            lo++;
        } else {
            CU_ASSERT(w[i] < w0[i] && w[i] > w0[i] / 8);
            mid++;
        }
    }
    CU_ASSERT(hi > 0 && lo > 0 && mid > 0);
}

/* yarn: the attention factor multiplies cos and sin (0.1 ln 4 + 1 by default, the
 * configured one otherwise); the first pairs keep their frequency, the last are
 * interpolated (divided by the factor). */
static void test_yarn_attention_factor(void)
{
    struct tfm_config c = base_config(64, 1e6f, 16384);
    c.rope_type = TFM_ROPE_YARN;
    c.rope_factor = 4;
    c.rope_original_max_pos = 4096;
    float w[32], w0[32];
    float a = rope_inv_freq(w, &c);
    CU_ASSERT_DOUBLE_EQUAL(a, 0.1 * log(4.0) + 1, 1e-7);
    struct tfm_config d = base_config(64, 1e6f, 16384);
    rope_inv_freq(w0, &d);
    CU_ASSERT_EQUAL(w[0], w0[0]);
    CU_ASSERT_DOUBLE_EQUAL(w[31], w0[31] / 4, 1e-7 * w0[31]);
    static float t[8 * 64];
    rope_table(t, 8, &c);
    CU_ASSERT_EQUAL(t[0], a); /* cos 0 = 1, times a */
    for (int p = 0; p < 8; p++)
        for (int i = 0; i < 32; i++) {
            double r = hypot(t[p * 64 + i], t[p * 64 + 32 + i]);
            CU_ASSERT_DOUBLE_EQUAL(r, a, 1e-6);
        }
    c.rope_attention_factor = 1.5f;
    CU_ASSERT_EQUAL(rope_inv_freq(w, &c), 1.5f);
}

static void test_rope_same(void)
{
    struct tfm_config a = base_config(64, 1e6f, 16384);
    a.rope_type = TFM_ROPE_YARN;
    a.rope_factor = 4;
    struct tfm_config b = a;
    CU_ASSERT(rope_same(&a, &b));
    b.n_layers = 7; /* not a rotary field */
    CU_ASSERT(rope_same(&a, &b));
    /* yarn without original_max_pos reads max_position_embeddings */
    b = a;
    b.max_position_embeddings = 8192;
    CU_ASSERT(!rope_same(&a, &b));
    b.rope_original_max_pos = a.rope_original_max_pos = 4096;
    CU_ASSERT(rope_same(&a, &b));
    float *fields[] = {&b.rope_theta, &b.rope_factor, &b.rope_low_freq_factor,
                       &b.rope_high_freq_factor, &b.rope_beta_fast, &b.rope_beta_slow,
                       &b.rope_attention_factor};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        struct tfm_config keep = b;
        *fields[i] += 0.5f;
        CU_ASSERT(!rope_same(&a, &b));
        b = keep;
    }
    b.rope_type = TFM_ROPE_LINEAR;
    CU_ASSERT(!rope_same(&a, &b));
    b = a;
    b.rope_original_max_pos = 2048;
    CU_ASSERT(!rope_same(&a, &b));
    b = a;
    b.head_dim = 32;
    CU_ASSERT(!rope_same(&a, &b));
}

/* ---------------------------------------------------------------- checks */

static void expect_bad(const struct tfm_config *c, const char *want)
{
    char err[512] = "";
    CU_ASSERT_EQUAL(tfm_config_check(c, err, sizeof err), -1);
    if (!strstr(err, want)) {
        CU_FAIL("unexpected message");
        fprintf(stderr, "\n  expected \"%s\" in: %s\n", want, err);
    }
}

static void test_config_check(void)
{
    struct tfm_config ok = base_config(64, 5e5f, 131072);
    char err[256];
    CU_ASSERT_EQUAL(tfm_config_check(&ok, err, sizeof err), 0);
    struct tfm_config l3 = ok;
    l3.rope_type = TFM_ROPE_LLAMA3;
    l3.rope_factor = 8;
    l3.rope_low_freq_factor = 1;
    l3.rope_high_freq_factor = 4;
    l3.rope_original_max_pos = 8192;
    CU_ASSERT_EQUAL(tfm_config_check(&l3, err, sizeof err), 0);

    struct tfm_config c = ok;
    c.rope_type = 7;
    expect_bad(&c, "rope_type = 7 is not default (0), linear (1), llama3 (2) or yarn (3)");
    c = ok;
    c.rope_factor = 4;
    expect_bad(&c, "rope_scaling factor = 4 is set but rope_type default does not use it");
    for (int t = TFM_ROPE_LINEAR; t <= TFM_ROPE_YARN; t++) {
        c = t == TFM_ROPE_LLAMA3 ? l3 : ok;
        c.rope_type = t;
        c.rope_factor = 0.5f;
        char want[128];
        snprintf(want, sizeof want, "rope_scaling factor = 0.5 (rope_type %s) must be >= 1",
                 tfm_rope_type_name(t));
        expect_bad(&c, want);
    }
    c = l3;
    c.rope_high_freq_factor = 1;
    expect_bad(&c, "low_freq_factor = 1 must be < high_freq_factor = 1");
    c = l3;
    c.rope_original_max_pos = 0;
    expect_bad(&c, "original_max_position_embeddings = 0 (rope_type llama3) must be positive");
    c = l3;
    c.rope_low_freq_factor = 0;
    expect_bad(&c, "low_freq_factor = 0 (rope_type llama3) must be > 0");
    c = l3;
    c.rope_beta_fast = 32;
    expect_bad(&c, "rope_scaling beta_fast = 32 is set but rope_type llama3 does not use it");
    c = ok;
    c.rope_type = TFM_ROPE_LINEAR;
    c.rope_factor = 2;
    CU_ASSERT_EQUAL(tfm_config_check(&c, err, sizeof err), 0);
    c.rope_original_max_pos = 4096;
    expect_bad(&c, "original_max_position_embeddings = 4096 is set but rope_type linear");
    c = ok;
    c.rope_type = TFM_ROPE_YARN;
    c.rope_factor = 4;
    CU_ASSERT_EQUAL(tfm_config_check(&c, err, sizeof err), 0);
    c.rope_beta_fast = 0.5f;
    expect_bad(&c, "beta_fast = 0.5 must be >= beta_slow = 1");
    c.rope_beta_fast = 0;
    c.rope_attention_factor = -1;
    expect_bad(&c, "attention_factor = -1 (rope_type yarn) must be finite and >= 0");
    c.rope_attention_factor = 0;
    c.rope_factor = NAN;
    expect_bad(&c, "factor = nan (rope_type yarn) must be finite and >= 0");

    CU_ASSERT_STRING_EQUAL(tfm_rope_type_name(TFM_ROPE_LLAMA3), "llama3");
    CU_ASSERT_STRING_EQUAL(tfm_rope_type_name(9), "?");
    CU_ASSERT_EQUAL(tfm_rope_type_from_name("yarn"), TFM_ROPE_YARN);
    CU_ASSERT_EQUAL(tfm_rope_type_from_name("dynamic"), -1);
}

int main(void)
{
    static const struct test_case rope[] = {
        {"tables vs Hugging Face's (tests/golden/rope.txt)", test_golden_tables},
        {"default bitwise as before; linear = stretched positions", test_default_and_linear},
        {"llama3: high band kept, low band / factor, smooth between", test_llama3_bands},
        {"yarn: attention factor on cos and sin, band ends", test_yarn_attention_factor},
        {"rope_same compares every rotary field", test_rope_same},
        {"tfm_config_check: rope_scaling messages", test_config_check},
        {NULL, NULL},
    };
    static const struct test_suite suites[] = {{"rope", rope}, {NULL, NULL}};
    return test_main(suites);
}
