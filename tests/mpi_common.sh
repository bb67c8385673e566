# Shared by the multi-rank tests: how to call mpirun here, where the binaries are.
# Sourced, not run. Needs top_srcdir and top_builddir (make check exports them).
set -u
: "${top_srcdir:=$(cd "$(dirname "$0")/.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
LIBRA="$top_builddir/src/libra"
CHECK_RUN="$top_builddir/tests/check_run"
export LIBRA_INPUTS="$top_srcdir/inputs"
: "${LIBRA_TEST_NPM:=$top_srcdir/tests/npm}" # tools/setup-test's reference packages
export LIBRA_TEST_NPM

MPIRUN="mpirun --oversubscribe"
[ "$(id -u)" = 0 ] && MPIRUN="$MPIRUN --allow-run-as-root"
# Quiet, loopback-only transports: tests never touch a real network.
export OMPI_MCA_btl="self,vader" OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none

scratch() {
    d="$top_builddir/tests/out/$1-$$"
    rm -rf "$d" && mkdir -p "$d" && echo "$d"
}

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

# emu_config FILE STEPS INTERVAL OUTFILE SCHEDULE-GROUPS [extra lines]
emu_config() {
    cat > "$1" <<CFG
run = { name = "mpi-test"; steps = $2; seed = 7; progress_interval_s = 0.5; };
device = { type = "emu"; hardware = "hardware/a800.cfg"; time_scale = 300.0; };
model = { profile = "models/qwen3-4b.cfg"; };
rollout = { n_samples = 2; max_turns = 6; max_tokens_per_turn = 2048; max_tokens = 12288; };
train = { batch_size = 8; max_staleness = 2; sync_interval = 1; };
plan = { mode = "schedule"; interval = $3; schedule = ( $5 ); };
workload = { preset = "workloads/r2e-gym.cfg"; };
output = { file = "$4"; };
${6:-}
CFG
}
