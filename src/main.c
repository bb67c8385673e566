/* libra: agentic RL post-training as one MPI job. Thin entry point: the commands and
 * their dispatch are src/driver/libra_main.c. */
#include "libra/driver.h"

int main(int argc, char **argv) { return driver_main(argc, argv); }
