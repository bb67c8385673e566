/* Message packing: round trips and rejection of malformed messages. */
#include <string.h>

#include "libra/wire.h"
#include "testutil.h"

static void test_turn_req_roundtrip(void)
{
    struct wire_buf b = {0};
    struct wire_turn_req h = {.traj_id = 1234567890123LL, .prompt_id = 42, .turn = 3,
                              .ctx_tokens = 900, .budget = 512, .resume_generated = 17,
                              .n_failures = 2, .last_failed = 1, .last_large = 0,
                              .step_start = 9, .n_tokens = 5};
    int32_t tok[5] = {1, 2, 3, 151935, 0};
    wire_pack_turn_req(&b, &h, tok);
    CU_ASSERT_EQUAL(b.len, sizeof h + sizeof tok);
    struct wire_turn_req g;
    const int32_t *gt;
    CU_ASSERT_EQUAL_FATAL(wire_unpack_turn_req(b.data, b.len, &g, &gt), 0);
    CU_ASSERT_EQUAL(memcmp(&g, &h, sizeof h), 0);
    CU_ASSERT_EQUAL(memcmp(gt, tok, sizeof tok), 0);
    CU_ASSERT_EQUAL(wire_unpack_turn_req(b.data, b.len - 1, &g, &gt), -1);
    CU_ASSERT_EQUAL(wire_unpack_turn_req(b.data, 10, &g, &gt), -1);
    /* a count that disagrees with the length */
    h.n_tokens = 6;
    wire_buf_reset(&b);
    wire_pack_turn_req(&b, &h, (int32_t[6]){0});
    CU_ASSERT_EQUAL(wire_unpack_turn_req(b.data, b.len - 4, &g, &gt), -1);
    /* negative fields */
    h.n_tokens = 0;
    h.budget = -1;
    wire_buf_reset(&b);
    wire_pack_turn_req(&b, &h, NULL);
    CU_ASSERT_EQUAL(wire_unpack_turn_req(b.data, b.len, &g, &gt), -1);
    wire_buf_free(&b);
}

static void test_turn_result_roundtrip(void)
{
    struct wire_buf b = {0};
    struct wire_turn_result h = {.traj_id = 77, .turn = 1, .leader = 5, .gen_tokens = 300,
                                 .version_first = 2, .version_last = 3, .final = 0,
                                 .partial = 0, .tool = 1, .tool_status = 2,
                                 .payload_tokens = 4000, .tool_latency_s = 1.5,
                                 .busy_rank_s = 0.25, .n_tokens = 3};
    int32_t tok[3] = {10, 11, 12};
    float lp[3] = {-0.5f, -1.25f, -3.0f};
    wire_pack_turn_result(&b, &h, tok, lp);
    struct wire_turn_result g;
    const int32_t *gt;
    const float *gl;
    CU_ASSERT_EQUAL_FATAL(wire_unpack_turn_result(b.data, b.len, &g, &gt, &gl), 0);
    CU_ASSERT_EQUAL(memcmp(&g, &h, sizeof h), 0);
    CU_ASSERT_EQUAL(memcmp(gt, tok, sizeof tok), 0);
    CU_ASSERT_EQUAL(memcmp(gl, lp, sizeof lp), 0);
    CU_ASSERT_EQUAL(wire_unpack_turn_result(b.data, b.len + 8, &g, &gt, &gl), -1);
    wire_buf_free(&b);
}

static void test_handback_and_batch(void)
{
    struct wire_buf b = {0};
    struct wire_handback_hdr hh = {2, 9};
    struct wire_turn_result r[2] = {{.traj_id = 1, .partial = 1, .gen_tokens = 5},
                                    {.traj_id = 2, .tool = 0, .payload_tokens = 7}};
    wire_buf_put(&b, &hh, sizeof hh);
    wire_buf_put(&b, r, sizeof r);
    struct wire_handback_hdr gh;
    const struct wire_turn_result *gi;
    CU_ASSERT_EQUAL_FATAL(wire_unpack_handback(b.data, b.len, &gh, &gi), 0);
    CU_ASSERT_EQUAL(gh.count, 2);
    CU_ASSERT_EQUAL(gi[1].payload_tokens, 7);
    CU_ASSERT_EQUAL(wire_unpack_handback(b.data, b.len - 1, &gh, &gi), -1);
    /* empty handback is valid */
    hh.count = 0;
    CU_ASSERT_EQUAL(wire_unpack_handback(&hh, sizeof hh, &gh, &gi), 0);
    hh.count = -3;
    CU_ASSERT_EQUAL(wire_unpack_handback(&hh, sizeof hh, &gh, &gi), -1);

    wire_buf_reset(&b);
    struct wire_train_batch th = {4, 3, 2, 3, 1000, 600};
    struct wire_train_item it[2] = {{5, 400, 300}, {6, 600, 300}};
    wire_buf_put(&b, &th, sizeof th);
    wire_buf_put(&b, it, sizeof it);
    struct wire_train_batch gb;
    const struct wire_train_item *gti;
    CU_ASSERT_EQUAL_FATAL(wire_unpack_train_batch(b.data, b.len, &gb, &gti), 0);
    CU_ASSERT_EQUAL(gb.n_replicas, 3);
    CU_ASSERT_EQUAL(gti[1].tokens, 600);
    CU_ASSERT_EQUAL(wire_unpack_train_batch(b.data, sizeof th + 8, &gb, &gti), -1);
    wire_buf_free(&b);
}

static void test_tag_names(void)
{
    CU_ASSERT_STRING_EQUAL(wire_tag_name(TAG_PLAN), "plan");
    CU_ASSERT_STRING_EQUAL(wire_tag_name(TAG_HANDBACK), "handback");
    CU_ASSERT_STRING_EQUAL(wire_tag_name(9999), "unknown");
}

int main(void)
{
    static const struct test_case cases[] = {
        {"turn request round trip and malformed lengths", test_turn_req_roundtrip},
        {"turn result round trip", test_turn_result_roundtrip},
        {"handback and training batch", test_handback_and_batch},
        {"tag names", test_tag_names},
        {NULL, NULL}};
    static const struct test_suite suites[] = {{"wire", cases}, {NULL, NULL}};
    return test_main(suites);
}
