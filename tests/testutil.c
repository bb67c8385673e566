/* Shared CUnit driver (see testutil.h). */
#define _POSIX_C_SOURCE 200809L
#include "testutil.h"

#include <CUnit/Basic.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

int test_main(const struct test_suite *suites)
{
    if (CU_initialize_registry() != CUE_SUCCESS) {
        fprintf(stderr, "CUnit: %s\n", CU_get_error_msg());
        return 2;
    }
    for (const struct test_suite *s = suites; s->name; s++) {
        CU_pSuite suite = CU_add_suite(s->name, NULL, NULL);
        if (!suite) goto fail;
        for (const struct test_case *c = s->cases; c->name; c++)
            if (!CU_add_test(suite, c->name, c->fn)) goto fail;
    }
    CU_basic_set_mode(CU_BRM_VERBOSE);
    if (CU_basic_run_tests() != CUE_SUCCESS) goto fail;
    unsigned failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    return failed ? 1 : 0;
fail:
    fprintf(stderr, "CUnit: %s\n", CU_get_error_msg());
    CU_cleanup_registry();
    return 2;
}

const char *test_path(const char *rel)
{
    static char buf[8][1024];
    static int next;
    const char *top = getenv("top_srcdir");
    if (!top || !*top) top = LIBRA_SRCDIR;
    char *out = buf[next++ % 8];
    snprintf(out, sizeof buf[0], "%s/%s", top, rel);
    return out;
}

const char *test_scratch_dir(const char *name)
{
    static char buf[1024];
    const char *top = getenv("top_builddir");
    if (!top || !*top) top = ".";
    snprintf(buf, sizeof buf, "%s/tests", top);
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) return NULL;
    snprintf(buf, sizeof buf, "%s/tests/out", top);
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) return NULL;
    snprintf(buf, sizeof buf, "%s/tests/out/%s-%ld", top, name, (long)getpid());
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) return NULL;
    return buf;
}
