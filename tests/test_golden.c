/*
 * Golden test of the transformer (include/libra/tfm.h), the model-file loader
 * (tfm_io.h) and AdamW (adamw.h) against the PyTorch reference: for each case in
 * tests/golden/ it loads <case>.model.h5 with tfm_load, reads <case>.golden.h5 (written
 * by tools/torch-reference.py in float64, see tests/golden/README) and checks
 *   - the loaded config (family, tying, biases, qk-norm) against the case's name;
 *   - tfm_forward: logits at temperature 1, log-probs and entropies at the batch
 *     temperature, and its return value sum_t w_t logprob_t = -J;
 *   - tfm_backward: J and the gradient of every tensor tfm_tensors lists, by its
 *     Hugging Face name (the golden file must hold exactly those), and that a second
 *     call ADDS (the gradients double);
 *   - 5 adamw_step calls on the same batch: the schedule's learning rate, the global
 *     gradient norm before clipping and the loss before each step and after the last.
 *
 * Tolerances (why they are what they are: the reference is float64, the C code float32
 * throughout; a float32 run of the reference meets them with a margin of about 100;
 * the reference's --validate shows that the classic bugs miss them by 10x or more):
 *   tensors (logits, logprob, entropy, every gradient):
 *       |a_i - b_i| <= 1e-4 * max(|b_i|, scale),  scale = max_j |b_j| over the tensor
 *   (so in effect 1e-4 of the tensor's largest magnitude: a purely element-wise
 *   relative test would fail on elements that are small only through cancellation,
 *   where float32 summation leaves an error proportional to the summands, not to the
 *   result; an all-zero tensor is compared with scale 1);
 *   losses J (forward, backward, and the AdamW trajectory): |a - b| <= 1e-5 |b|;
 *   gradient norms 1e-4 relative; learning rates 1e-6 relative (a float).
 */
#define _POSIX_C_SOURCE 200809L
#include <hdf5.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libra/adamw.h"
#include "libra/tfm.h"
#include "libra/tfm_io.h"
#include "testutil.h"

#define TOL_TENSOR 1e-4
#define TOL_LOSS 1e-5
#define TOL_LR 1e-6
#define N_STEPS 5
#define MAX_TENSORS 512

struct golden_case {
    const char *name;
    int family, tied, bias, qk_norm; /* what the model file must load as */
};

/* ---- HDF5 reading ----------------------------------------------------------------- */

/* The whole dataset converted to memtype (elem bytes each); *n gets the element count.
 * NULL (and a CUnit failure naming the dataset) if it is missing or unreadable. */
static void *read_dataset(hid_t loc, const char *file, const char *name, hid_t memtype,
                          size_t elem, size_t *n)
{
    *n = 0;
    if (H5Lexists(loc, name, H5P_DEFAULT) <= 0) {
        printf("\n  %s: no dataset %s\n", file, name);
        CU_FAIL("golden dataset missing");
        return NULL;
    }
    hid_t d = H5Dopen2(loc, name, H5P_DEFAULT);
    if (d < 0) {
        CU_FAIL("H5Dopen2");
        return NULL;
    }
    hid_t sp = H5Dget_space(d);
    hssize_t np = H5Sget_simple_extent_npoints(sp);
    void *buf = np >= 0 ? malloc(((size_t)np + 1) * elem) : NULL;
    if (!buf || H5Dread(d, memtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0) {
        printf("\n  %s: cannot read dataset %s\n", file, name);
        CU_FAIL("golden dataset unreadable");
        free(buf);
        buf = NULL;
    } else {
        *n = (size_t)np;
    }
    H5Sclose(sp);
    H5Dclose(d);
    return buf;
}

/* A scalar attribute of the root converted to memtype; 0 or -1 (with a failure). */
static int read_attr(hid_t f, const char *name, hid_t memtype, void *out)
{
    if (H5Aexists(f, name) <= 0) {
        printf("\n  golden file: no attribute %s\n", name);
        CU_FAIL("golden attribute missing");
        return -1;
    }
    hid_t a = H5Aopen(f, name, H5P_DEFAULT);
    int rc = a >= 0 && H5Aread(a, memtype, out) >= 0 ? 0 : -1;
    if (a >= 0) H5Aclose(a);
    if (rc) CU_FAIL("golden attribute unreadable");
    return rc;
}

static double attr_d(hid_t f, const char *name)
{
    double v = NAN;
    read_attr(f, name, H5T_NATIVE_DOUBLE, &v);
    return v;
}

static int64_t attr_i64(hid_t f, const char *name)
{
    int64_t v = 0;
    read_attr(f, name, H5T_NATIVE_INT64, &v);
    return v;
}

/* ---- comparisons ------------------------------------------------------------------- */

/* The tensor test of the header comment. Returns max_i |a_i - b_i| / max(|b_i|, scale),
 * which passes when <= tol; prints the tensor, the worst element and both values on
 * failure. */
static double check_tensor(const char *cs, const char *what, const float *a, const float *b,
                           size_t n, double tol)
{
    double scale = 0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs((double)b[i]));
    if (scale == 0) scale = 1;
    double worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - (double)b[i]) / fmax(fabs((double)b[i]), scale);
        if (!(e <= worst)) { /* also catches NaN */
            worst = isnan(e) ? INFINITY : e;
            at = i;
        }
    }
    if (!(worst <= tol))
        printf("\n  %s: %s differs: worst |a-b|/max(|b|,scale) = %.3g at [%zu] "
               "(C %.9g, reference %.9g, scale %.3g, %zu elements)",
               cs, what, worst, at, (double)a[at], (double)b[at], scale, n);
    CU_ASSERT(worst <= tol);
    return worst;
}

static double check_scalar(const char *cs, const char *what, double a, double b, double tol)
{
    double e = fabs(a - b) / fmax(fabs(b), 1e-300);
    if (!(e <= tol))
        printf("\n  %s: %s: C %.12g, reference %.12g (relative %.3g > %.0e)", cs, what, a, b,
               e, tol);
    CU_ASSERT(e <= tol);
    return e;
}

/* ---- one case ------------------------------------------------------------------------ */

struct golden {
    int *seq_len;
    int32_t *tokens, *targets;
    float *weights, *logits, *logprob, *entropy;
    double *losses, *norms, *lrs;
    size_t S, T, n_logits, n_losses, n_norms, n_lrs;
    float temperature;
    double loss;
    struct adamw_config ac;
};

static void golden_free(struct golden *g)
{
    free(g->seq_len);
    free(g->tokens);
    free(g->targets);
    free(g->weights);
    free(g->logits);
    free(g->logprob);
    free(g->entropy);
    free(g->losses);
    free(g->norms);
    free(g->lrs);
}

static int golden_read(hid_t f, const char *path, struct golden *g)
{
    size_t n1, n2, n3, n4;
    g->seq_len = read_dataset(f, path, "seq_len", H5T_NATIVE_INT, sizeof(int), &g->S);
    g->tokens = read_dataset(f, path, "tokens", H5T_NATIVE_INT32, sizeof(int32_t), &g->T);
    g->targets = read_dataset(f, path, "targets", H5T_NATIVE_INT32, sizeof(int32_t), &n1);
    g->weights = read_dataset(f, path, "weights", H5T_NATIVE_FLOAT, sizeof(float), &n2);
    g->logits = read_dataset(f, path, "logits", H5T_NATIVE_FLOAT, sizeof(float), &g->n_logits);
    g->logprob = read_dataset(f, path, "logprob", H5T_NATIVE_FLOAT, sizeof(float), &n3);
    g->entropy = read_dataset(f, path, "entropy", H5T_NATIVE_FLOAT, sizeof(float), &n4);
    g->losses = read_dataset(f, path, "adamw_losses", H5T_NATIVE_DOUBLE, sizeof(double),
                             &g->n_losses);
    g->norms = read_dataset(f, path, "adamw_grad_norms", H5T_NATIVE_DOUBLE, sizeof(double),
                            &g->n_norms);
    g->lrs = read_dataset(f, path, "adamw_lrs", H5T_NATIVE_DOUBLE, sizeof(double), &g->n_lrs);
    if (read_attr(f, "temperature", H5T_NATIVE_FLOAT, &g->temperature) != 0) return -1;
    g->loss = attr_d(f, "loss");
    g->ac = (struct adamw_config){
        .lr = (float)attr_d(f, "lr"),
        .beta1 = (float)attr_d(f, "beta1"),
        .beta2 = (float)attr_d(f, "beta2"),
        .eps = (float)attr_d(f, "eps"),
        .weight_decay = (float)attr_d(f, "weight_decay"),
        .clip_norm = (float)attr_d(f, "clip_norm"),
        .schedule = (int)attr_i64(f, "schedule"),
        .warmup_steps = attr_i64(f, "warmup_steps"),
        .total_steps = attr_i64(f, "total_steps"),
        .min_lr_ratio = (float)attr_d(f, "min_lr_ratio"),
    };
    int ok = g->seq_len && g->tokens && g->targets && g->weights && g->logits && g->logprob &&
             g->entropy && g->losses && g->norms && g->lrs;
    if (!ok) return -1;
    size_t sum = 0;
    for (size_t i = 0; i < g->S; i++) sum += (size_t)g->seq_len[i];
    ok = sum == g->T && n1 == g->T && n2 == g->T && n3 == g->T && n4 == g->T &&
         g->n_losses == N_STEPS + 1 && g->n_norms == N_STEPS && g->n_lrs == N_STEPS;
    CU_ASSERT(ok);
    return ok ? 0 : -1;
}

static int count_links(hid_t loc)
{
    H5G_info_t info;
    return H5Gget_info(loc, &info) < 0 ? -1 : (int)info.nlinks;
}

/* Every gradient tfm_tensors lists against /grads/<name> (factor: 1, or 2 after a
 * second accumulating backward). Returns the worst metric, names it in *worst_name. */
static double check_grads(const char *cs, const char *path, hid_t f,
                          const struct tfm_config *c, const struct tfm_params *g, double factor,
                          char *worst_name, size_t wn)
{
    static struct tfm_tensor tt[MAX_TENSORS];
    int nt = tfm_tensors(c, g, tt, MAX_TENSORS);
    CU_ASSERT_FATAL(nt > 0 && nt <= MAX_TENSORS);
    hid_t grp = H5Gopen2(f, "grads", H5P_DEFAULT);
    CU_ASSERT_FATAL(grp >= 0);
    int n_golden = count_links(grp);
    if (n_golden != nt)
        printf("\n  %s: tfm_tensors lists %d tensors, the reference has %d gradients", cs, nt,
               n_golden);
    CU_ASSERT(n_golden == nt);
    double worst = 0;
    for (int i = 0; i < nt; i++) {
        size_t n, want = (size_t)tt[i].dims[0] * (tt[i].ndim == 2 ? (size_t)tt[i].dims[1] : 1);
        float *ref = read_dataset(grp, path, tt[i].name, H5T_NATIVE_FLOAT, sizeof(float), &n);
        if (!ref) continue;
        if (n != want) {
            printf("\n  %s: %s has %zu elements in the reference, %zu in tfm_tensors", cs,
                   tt[i].name, n, want);
            CU_FAIL("gradient shape");
        } else {
            if (factor != 1)
                for (size_t j = 0; j < n; j++) ref[j] = (float)(ref[j] * factor);
            char what[192];
            snprintf(what, sizeof what, "gradient %.95s%s", tt[i].name,
                     factor != 1 ? " (after a second, accumulating backward)" : "");
            double e = check_tensor(cs, what, tt[i].data, ref, n, TOL_TENSOR);
            if (e >= worst) {
                worst = e;
                snprintf(worst_name, wn, "%.95s", tt[i].name);
            }
        }
        free(ref);
    }
    H5Gclose(grp);
    return worst;
}

static void run_case(const struct golden_case *gc)
{
    const char *cs = gc->name;
    char rel[256], model_path[1024], golden_path[1024], err[1024] = "";
    snprintf(rel, sizeof rel, "tests/golden/%s.model.h5", cs);
    snprintf(model_path, sizeof model_path, "%s", test_path(rel));
    snprintf(rel, sizeof rel, "tests/golden/%s.golden.h5", cs);
    snprintf(golden_path, sizeof golden_path, "%s", test_path(rel));

    struct tfm_config c;
    struct tfm_params p, g;
    memset(&p, 0, sizeof p);
    if (tfm_load(model_path, &c, &p, NULL, err, sizeof err) != 0) {
        printf("\n  %s: tfm_load: %s", cs, err);
        CU_FAIL("tfm_load");
        return;
    }
    /* The loader must map model_type and the flags as the reference meant them. */
    CU_ASSERT_EQUAL(c.family, gc->family);
    CU_ASSERT_EQUAL(c.tie_word_embeddings, gc->tied);
    CU_ASSERT_EQUAL(c.attention_bias, gc->bias);
    CU_ASSERT_EQUAL(c.qk_norm, gc->qk_norm);
    CU_ASSERT(tfm_config_check(&c, err, sizeof err) == 0);

    hid_t f = H5Fopen(golden_path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) {
        printf("\n  %s: cannot open %s", cs, golden_path);
        CU_FAIL("golden file");
        tfm_params_free(&p);
        return;
    }
    struct golden gd;
    memset(&gd, 0, sizeof gd);
    if (golden_read(f, golden_path, &gd) != 0 || gd.n_logits != gd.T * (size_t)c.vocab_size) {
        CU_FAIL("golden file contents");
        goto out_golden;
    }
    int T = (int)gd.T, V = c.vocab_size;
    struct tfm_batch b = {.n_seq = (int)gd.S,
                          .seq_len = gd.seq_len,
                          .tokens = gd.tokens,
                          .targets = gd.targets,
                          .weights = gd.weights,
                          .temperature = gd.temperature};
    struct tfm_state *s = tfm_state_create(&c, T);
    CU_ASSERT_FATAL(s != NULL);

    /* forward */
    float *lp = calloc((size_t)T, sizeof *lp), *ent = calloc((size_t)T, sizeof *ent);
    float *lg = calloc((size_t)T * (size_t)V, sizeof *lg);
    CU_ASSERT_FATAL(lp && ent && lg);
    double fsum = tfm_forward(&c, &p, s, &b, lp, ent, lg);
    double e_lg = check_tensor(cs, "logits (temperature 1)", lg, gd.logits, gd.n_logits,
                               TOL_TENSOR);
    double e_lp = check_tensor(cs, "logprob", lp, gd.logprob, gd.T, TOL_TENSOR);
    double e_en = check_tensor(cs, "entropy", ent, gd.entropy, gd.T, TOL_TENSOR);
    double e_f = check_scalar(cs, "tfm_forward's sum w logprob (= -J)", -fsum, gd.loss, TOL_LOSS);

    /* backward: J and every gradient; then a second call must add */
    tfm_params_alloc(&g, &c);
    CU_ASSERT_FATAL(g.n == p.n);
    double J = tfm_backward(&c, &p, s, &b, &g);
    double e_J = check_scalar(cs, "tfm_backward's J", J, gd.loss, TOL_LOSS);
    char worst_name[96] = "";
    double e_g = check_grads(cs, golden_path, f, &c, &g, 1.0, worst_name, sizeof worst_name);
    char ignore[96];
    tfm_backward(&c, &p, s, &b, &g);
    check_grads(cs, golden_path, f, &c, &g, 2.0, ignore, sizeof ignore);

    /* AdamW: 5 steps on the same batch */
    struct adamw opt;
    adamw_init(&opt, &gd.ac, p.n);
    double e_loss = 0, e_norm = 0, e_lr = 0;
    for (int k = 0; k < N_STEPS; k++) {
        char what[64];
        memset(g.mem, 0, g.n * sizeof *g.mem);
        double Jk = tfm_backward(&c, &p, s, &b, &g);
        snprintf(what, sizeof what, "loss before AdamW step %d", k + 1);
        e_loss = fmax(e_loss, check_scalar(cs, what, Jk, gd.losses[k], TOL_LOSS));
        snprintf(what, sizeof what, "adamw_lr(step %d)", k + 1);
        e_lr = fmax(e_lr, check_scalar(cs, what, adamw_lr(&gd.ac, k + 1), gd.lrs[k], TOL_LR));
        double norm = adamw_step(&opt, p.mem, g.mem);
        snprintf(what, sizeof what, "gradient norm at AdamW step %d", k + 1);
        e_norm = fmax(e_norm, check_scalar(cs, what, norm, gd.norms[k], TOL_TENSOR));
    }
    CU_ASSERT_EQUAL(opt.step, N_STEPS);
    double J_end = -tfm_forward(&c, &p, s, &b, lp, NULL, NULL);
    e_loss = fmax(e_loss, check_scalar(cs, "loss after 5 AdamW steps", J_end,
                                       gd.losses[N_STEPS], TOL_LOSS));
    adamw_free(&opt);

    printf("\n    %s: worst errors: logits %.1e logprob %.1e entropy %.1e J %.1e/%.1e "
           "grads %.1e (%s) | adamw losses %.1e norms %.1e lrs %.1e  ",
           cs, e_lg, e_lp, e_en, e_f, e_J, e_g, worst_name, e_loss, e_norm, e_lr);

    tfm_params_free(&g);
    free(lp);
    free(ent);
    free(lg);
    tfm_state_free(s);
out_golden:
    golden_free(&gd);
    H5Fclose(f);
    tfm_params_free(&p);
}

static const struct golden_case CASES[] = {
    {"qwen2-gqa-untied", TFM_QWEN2, 0, 1, 0},
    {"qwen3-gqa-tied", TFM_QWEN3, 1, 0, 1},
    {"llama-mha-untied", TFM_LLAMA, 0, 0, 0},
};

static void test_qwen2_gqa_untied(void) { run_case(&CASES[0]); }
static void test_qwen3_gqa_tied(void) { run_case(&CASES[1]); }
static void test_llama_mha_untied(void) { run_case(&CASES[2]); }

static const struct test_case golden_tests[] = {
    {"qwen2-gqa-untied: biases, GQA 4/2, untied, cosine, partial clipping",
     test_qwen2_gqa_untied},
    {"qwen3-gqa-tied: qk-norm, H*D != C, GQA 4/1, tied, constant, clipped",
     test_qwen3_gqa_tied},
    {"llama-mha-untied: K = H, untied, cosine to its floor, no clipping",
     test_llama_mha_untied},
    {NULL, NULL},
};

int main(void)
{
    static const struct test_suite suites[] = {{"golden", golden_tests}, {NULL, NULL}};
    return test_main(suites);
}
