/* libra-sim: the whole libra job in virtual time on one core. Thin entry point
 * (src/driver/sim_run.c). */
#include "libra/driver.h"

int main(int argc, char **argv) { return driver_run_sim(argc, argv); }
