#!/bin/bash
# Runs a config on this machine with as many ranks as its plans need (emulated
# devices: any number of ranks can share the cores).
#   jobs/emu-local.sh [CONFIG]      (default inputs/emu-r2e-48gpu.cfg: 49 ranks)
set -euo pipefail
cd "$(dirname "$0")/.."
config="${1:-inputs/emu-r2e-48gpu.cfg}"
np=$(src/libra --check-config "$config" | sed -n 's/.*mpirun -np \([0-9]*\).*/\1/p')
exec tools/mpirun-local -np "$np" src/libra "$config"
