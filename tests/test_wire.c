/* Message packing: batch round trips and rejection of malformed messages. */
#include <string.h>

#include "libra/wire.h"
#include "testutil.h"

static struct wire_turn_req sample_req(int64_t id, int32_t n_tokens)
{
    return (struct wire_turn_req){.traj_id = id, .prompt_id = 42, .turn = 3, .ctx_tokens = 900,
                                  .budget = 512, .resume_generated = 17, .n_failures = 2,
                                  .last_failed = 1, .last_large = 0, .step_start = 9,
                                  .n_tokens = n_tokens};
}

static void test_turn_req_batch(void)
{
    struct wire_buf b = {0};
    int32_t tok[5] = {1, 2, 3, 151935, 0};
    struct wire_turn_req h1 = sample_req(1234567890123LL, 5), h2 = sample_req(7, 0);
    wire_batch_begin(&b, 0);
    wire_batch_add_turn_req(&b, &h1, tok);
    wire_batch_add_turn_req(&b, &h2, NULL);
    CU_ASSERT_EQUAL(wire_batch_count(&b), 2);
    CU_ASSERT_EQUAL(b.len, sizeof(struct wire_batch_hdr) + 2 * sizeof h1 + sizeof tok);

    struct wire_reader rd;
    struct wire_turn_req g;
    const int32_t *gt;
    CU_ASSERT_EQUAL_FATAL(wire_reader_init(&rd, b.data, b.len), 2);
    CU_ASSERT_EQUAL(rd.sender, 0);
    CU_ASSERT_EQUAL_FATAL(wire_next_turn_req(&rd, &g, &gt), 1);
    CU_ASSERT_EQUAL(memcmp(&g, &h1, sizeof h1), 0);
    CU_ASSERT_EQUAL(memcmp(gt, tok, sizeof tok), 0);
    CU_ASSERT_EQUAL_FATAL(wire_next_turn_req(&rd, &g, &gt), 1);
    CU_ASSERT_EQUAL(g.traj_id, 7);
    CU_ASSERT_EQUAL(wire_next_turn_req(&rd, &g, &gt), 0);

    /* truncated anywhere: malformed, never a read past the end */
    for (size_t cut = 0; cut < b.len; cut += 7) {
        int n = wire_reader_init(&rd, b.data, cut), got = n < 0 ? -1 : 1;
        while (got == 1) got = wire_next_turn_req(&rd, &g, &gt);
        CU_ASSERT_EQUAL(got, -1);
    }
    /* trailing bytes after the announced items */
    wire_buf_put(&b, "xxxx", 4);
    CU_ASSERT_EQUAL_FATAL(wire_reader_init(&rd, b.data, b.len), 2);
    CU_ASSERT_EQUAL(wire_next_turn_req(&rd, &g, &gt), 1);
    CU_ASSERT_EQUAL(wire_next_turn_req(&rd, &g, &gt), 1);
    CU_ASSERT_EQUAL(wire_next_turn_req(&rd, &g, &gt), -1);
    /* a token count that runs past the message */
    struct wire_turn_req big = sample_req(1, 1000000);
    wire_batch_begin(&b, 0);
    wire_buf_put(&b, &big, sizeof big);
    struct wire_batch_hdr one = {1, 0};
    memcpy(b.data, &one, sizeof one);
    CU_ASSERT_EQUAL_FATAL(wire_reader_init(&rd, b.data, b.len), 1);
    CU_ASSERT_EQUAL(wire_next_turn_req(&rd, &g, &gt), -1);
    /* negative fields and counts */
    struct wire_turn_req neg = sample_req(1, 0);
    neg.budget = -1;
    wire_batch_begin(&b, 0);
    wire_batch_add_turn_req(&b, &neg, NULL);
    CU_ASSERT_EQUAL_FATAL(wire_reader_init(&rd, b.data, b.len), 1);
    CU_ASSERT_EQUAL(wire_next_turn_req(&rd, &g, &gt), -1);
    struct wire_batch_hdr negc = {-1, 0};
    CU_ASSERT_EQUAL(wire_reader_init(&rd, &negc, sizeof negc), -1);
    CU_ASSERT_EQUAL(wire_reader_init(&rd, &negc, 3), -1);
    wire_buf_free(&b);
}

static void test_turn_result_batch(void)
{
    struct wire_buf b = {0};
    struct wire_turn_result h = {.traj_id = 77, .turn = 1, .leader = 5, .gen_tokens = 300,
                                 .version_first = 2, .version_last = 3, .final = 0,
                                 .partial = 0, .tool = 1, .tool_status = 2,
                                 .payload_tokens = 4000, .tool_latency_s = 1.5,
                                 .busy_rank_s = 0.25, .n_tokens = 3, .n_payload = 2};
    int32_t tok[3] = {10, 11, 12}, ver[3] = {2, 2, 3}, pay[2] = {265, 266};
    float lp[3] = {-0.5f, -1.25f, -3.0f};
    wire_batch_begin(&b, 5);
    wire_batch_add_turn_result(&b, &h, tok, lp, ver, pay);
    struct wire_turn_result p = {.traj_id = 78, .partial = 1, .gen_tokens = 9, .tool = -1};
    wire_batch_add_turn_result(&b, &p, NULL, NULL, NULL, NULL);
    struct wire_reader rd;
    struct wire_turn_result g;
    struct wire_turn_arrays ga;
    CU_ASSERT_EQUAL_FATAL(wire_reader_init(&rd, b.data, b.len), 2);
    CU_ASSERT_EQUAL(rd.sender, 5);
    CU_ASSERT_EQUAL_FATAL(wire_next_turn_result(&rd, &g, &ga), 1);
    CU_ASSERT_EQUAL(memcmp(&g, &h, sizeof h), 0);
    CU_ASSERT_EQUAL(memcmp(ga.tokens, tok, sizeof tok), 0);
    CU_ASSERT_EQUAL(memcmp(ga.logprobs, lp, sizeof lp), 0);
    CU_ASSERT_EQUAL(memcmp(ga.versions, ver, sizeof ver), 0);
    CU_ASSERT_EQUAL(memcmp(ga.payload, pay, sizeof pay), 0);
    CU_ASSERT_EQUAL_FATAL(wire_next_turn_result(&rd, &g, &ga), 1);
    CU_ASSERT_EQUAL(g.partial, 1);
    CU_ASSERT_EQUAL(g.gen_tokens, 9);
    CU_ASSERT_EQUAL(wire_next_turn_result(&rd, &g, &ga), 0);
    /* truncated arrays are rejected */
    wire_batch_begin(&b, 5);
    wire_batch_add_turn_result(&b, &h, tok, lp, ver, pay);
    CU_ASSERT_EQUAL_FATAL(wire_reader_init(&rd, b.data, b.len - 4), 1);
    CU_ASSERT_EQUAL(wire_next_turn_result(&rd, &g, &ga), -1);
    /* an empty batch (an idle instance's handback) is valid */
    wire_batch_begin(&b, 5);
    CU_ASSERT_EQUAL(wire_reader_init(&rd, b.data, b.len), 0);
    CU_ASSERT_EQUAL(wire_next_turn_result(&rd, &g, &ga), 0);
    wire_buf_free(&b);
}

static void test_train_batch(void)
{
    struct wire_buf b = {0};
    struct wire_train_batch th = {4, 3, 2, 3, 1, 0, 1000, 600};
    struct wire_train_item e = {.traj_id = 5, .tokens = 400, .gen_tokens = 300};
    struct wire_train_item d = {.traj_id = 6, .tokens = 3, .gen_tokens = 2, .advantage = -0.5,
                                .has_data = 1};
    int32_t ids[3] = {256, 40, 41};
    float lp[3] = {0, -1.5f, -0.25f};
    uint8_t mask[3] = {0, 1, 1};
    wire_train_batch_begin(&b, &th);
    wire_train_batch_add(&b, &e, NULL, NULL, NULL);
    wire_train_batch_add(&b, &d, ids, lp, mask);
    struct wire_reader rd;
    struct wire_train_batch gb;
    struct wire_train_item gi;
    const int32_t *gids;
    const float *glp;
    const uint8_t *gm;
    CU_ASSERT_EQUAL_FATAL(wire_train_batch_read(&rd, b.data, b.len, &gb), 0);
    CU_ASSERT_EQUAL(gb.n_replicas, 3);
    CU_ASSERT_EQUAL_FATAL(wire_next_train_item(&rd, &gi, &gids, &glp, &gm), 1);
    CU_ASSERT_EQUAL(gi.tokens, 400);
    CU_ASSERT_PTR_NULL(gids);
    CU_ASSERT_EQUAL_FATAL(wire_next_train_item(&rd, &gi, &gids, &glp, &gm), 1);
    CU_ASSERT(gi.advantage == -0.5);
    CU_ASSERT_EQUAL(memcmp(gids, ids, sizeof ids), 0);
    CU_ASSERT_EQUAL(memcmp(glp, lp, sizeof lp), 0);
    CU_ASSERT_EQUAL(memcmp(gm, mask, sizeof mask), 0);
    CU_ASSERT_EQUAL(wire_next_train_item(&rd, &gi, &gids, &glp, &gm), 0);
    /* short messages, bad counts */
    CU_ASSERT_EQUAL_FATAL(wire_train_batch_read(&rd, b.data, b.len - 8, &gb), 0);
    CU_ASSERT_EQUAL(wire_next_train_item(&rd, &gi, &gids, &glp, &gm), 1);
    CU_ASSERT_EQUAL(wire_next_train_item(&rd, &gi, &gids, &glp, &gm), -1);
    CU_ASSERT_EQUAL(wire_train_batch_read(&rd, b.data, 4, &gb), -1);
    th.n_items = -1;
    wire_train_batch_begin(&b, &th);
    CU_ASSERT_EQUAL(wire_train_batch_read(&rd, b.data, b.len, &gb), -1);
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
        {"turn request batch: round trip, truncation, bad counts", test_turn_req_batch},
        {"turn result batch: round trip, partial, empty", test_turn_result_batch},
        {"training batch", test_train_batch},
        {"tag names", test_tag_names},
        {NULL, NULL}};
    static const struct test_suite suites[] = {{"wire", cases}, {NULL, NULL}};
    return test_main(suites);
}
