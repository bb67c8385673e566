/*
 * The start-of-run memory check's count of the ranks on rank 0's node under srun:
 * driver_slurm_tasks_on_node reads Slurm's compressed per-node task lists
 * (SLURM_STEP_TASKS_PER_NODE: "9,8(x5)", "2(x3)", "4"), which srun --mpi=pmix sets
 * where it sets no other count -- without it a multi-node job was judged as if all its
 * ranks shared one node.
 */
#include "libra/driver.h"
#include "testutil.h"

static void test_tasks_on_node(void)
{
    CU_ASSERT(driver_slurm_tasks_on_node("4", 0) == 4);
    CU_ASSERT(driver_slurm_tasks_on_node("4", 1) == 0); /* past the list */
    CU_ASSERT(driver_slurm_tasks_on_node("9,8(x5)", 0) == 9);
    CU_ASSERT(driver_slurm_tasks_on_node("9,8(x5)", 1) == 8);
    CU_ASSERT(driver_slurm_tasks_on_node("9,8(x5)", 5) == 8);
    CU_ASSERT(driver_slurm_tasks_on_node("9,8(x5)", 6) == 0);
    CU_ASSERT(driver_slurm_tasks_on_node("2(x3),1", 2) == 2);
    CU_ASSERT(driver_slurm_tasks_on_node("2(x3),1", 3) == 1);
    CU_ASSERT(driver_slurm_tasks_on_node("9,9,9,9,9,4", 5) == 4);
}

static void test_not_a_list(void)
{
    const char *bad[] = {"", "x", "0", "-3", "4(x", "4(x0)", "4(x2", "4;5", "4,,5", "4(y2)"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CU_ASSERT(driver_slurm_tasks_on_node(bad[i], 0) == 0 ||
                  driver_slurm_tasks_on_node(bad[i], 1) == 0);
    CU_ASSERT(driver_slurm_tasks_on_node(NULL, 0) == 0);
    CU_ASSERT(driver_slurm_tasks_on_node("4", -1) == 0);
    CU_ASSERT(driver_slurm_tasks_on_node("", 0) == 0);
    CU_ASSERT(driver_slurm_tasks_on_node("0", 0) == 0);
    CU_ASSERT(driver_slurm_tasks_on_node("4(x0)", 0) == 0);
}

int main(void)
{
    static const struct test_case cases[] = {
        {"Slurm's per-node task lists, node by node", test_tasks_on_node},
        {"what is not such a list gives 0", test_not_a_list},
        {NULL, NULL},
    };
    static const struct test_suite suites[] = {
        {"memory check", cases},
        {NULL, NULL},
    };
    return test_main(suites);
}
