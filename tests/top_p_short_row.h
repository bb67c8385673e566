/*
 * A row on which top-p's survivors fall short of top_p through rounding alone, so the
 * samplers must redo the nucleus over all ids (sampler_sample's and sample_k's
 * "survivors short of top_p" branch), shared by test_sampler, test_cuda_sampler_emu and
 * test_cuda.
 *
 * V = 2,049 ids at T = 0.9: id 0 has logit 0 (p = 1), the other 2,048 SHORT_ROW_LOGIT,
 * p = a = 0x1.f0003cp-31, a hair above (1 - top_p) / (V - 1) = 31 * 2^-35.
 * Adding a's to 1 in double rounds up (on the CPU in id order, on the GPU in 256
 * chunks), so the cutoff (1 - top_p) / (V - 1) * sum lands above a and drops all
 * 2,048 of them, while the target top_p * sum lands above 1, the mass of the one
 * survivor. Found by search; short_row_is_short checks the property in id order.
 */
#ifndef LIBRA_TESTS_TOP_P_SHORT_ROW_H
#define LIBRA_TESTS_TOP_P_SHORT_ROW_H

#include <math.h>

#include "libra/sampler.h"

enum { SHORT_ROW_V = 2049 };
#define SHORT_ROW_LOGIT (-0x1.2be59p+4f)

static const struct sampler_config short_row_config = {0.9f, 0x1.ffffc2p-1f, 0, 11};

static inline void short_row_fill(float *x)
{
    x[0] = 0.0f;
    for (int i = 1; i < SHORT_ROW_V; i++) x[i] = SHORT_ROW_LOGIT;
}

/* Whether the row, summed in id order as sampler_sample does, has its one survivor
 * short of the target. */
static inline int short_row_is_short(void)
{
    const double T = short_row_config.temperature, tp = short_row_config.top_p;
    const float a = (float)exp((double)SHORT_ROW_LOGIT / T);
    double sum = 1.0;
    for (int i = 1; i < SHORT_ROW_V; i++) sum += a;
    double cutoff = (1.0 - tp) / (SHORT_ROW_V - 1) * sum;
    return (double)a < cutoff && 1.0 < tp * sum;
}

/* Whether a sampler's candidate list (SHORT_ROW_V of them: int32 ids, or ids stored as
 * floats as sampler_sample keeps them) holds every id in order, as the redo over all
 * ids leaves it on this row (id 0 first, the ties by id). */
static inline int short_row_all_ids(const void *cand, int ids_are_floats)
{
    for (int i = 0; i < SHORT_ROW_V; i++)
        if (ids_are_floats ? ((const float *)cand)[i] != (float)i : ((const int *)cand)[i] != i)
            return 0;
    return 1;
}

#endif
