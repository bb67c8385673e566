#!/bin/sh
# RL on the CUDA device: 4 ranks (controller, 2 training replicas, 1 rollout instance)
# on the node's GPUs (one GPU serves all three workers if there is only one), the
# calc environment and the shipped model. The rollout instance decodes on the GPU
# engine, the replicas run their forwards and backwards on the GPU training path;
# after every step the replicas' parameter hashes must agree, the staleness bound must
# hold, the run must complete with rewards recorded, and the held-out greedy accuracy
# must rise (an H100 measured 0.062 -> 0.562). Without the CUDA module or a GPU it
# runs on the host stand-in of the CUDA module (LIBRA_CUDA_MODULE=host,
# include/libra/cuda_host.h), saying why: the same engine and checks, on the CPU;
# LIBRA_TEST_NEED_GPU=1 (tools/test --cuda) makes that a failure instead.
. "$(dirname "$0")/mpi_common.sh"
. "$(dirname "$0")/rl_common.sh"
devices=$("$LIBRA" --devices 2>&1)
case "$devices" in
*"GPU 0"*) ;;
*)
    [ "${LIBRA_TEST_NEED_GPU:-}" = 1 ] && fail "rl_cuda: LIBRA_TEST_NEED_GPU=1 and no GPU: $devices"
    echo "rl_cuda: no GPU ($devices): on the host stand-in of the CUDA module"
    export LIBRA_CUDA_MODULE=host
    devices=$("$LIBRA" --devices 2>&1)
    case "$devices" in
    *"device 0: host stand-in"*) ;;
    *) fail "rl_cuda: LIBRA_CUDA_MODULE=host: libra --devices says: $devices" ;;
    esac
    case "$(LIBRA_CUDA_HOST_MEM=4GiB "$LIBRA" --devices 2>&1)" in
    *'LIBRA_CUDA_HOST_MEM="4GiB" is not a byte count'*) ;;
    *) fail "rl_cuda: the host module took LIBRA_CUDA_HOST_MEM=4GiB" ;;
    esac ;;
esac
out=$(scratch rl-cuda)
rl_config "$out/run.cfg" "$out/run.h5" 4 2 1 2 2
sed -i 's/type = "cpu";/type = "cuda";/' "$out/run.cfg"
rl_job 4 "$out/run.cfg" "$out/run"
tail -n 3 "$out/run.stdout"
"$CHECK_RUN" "$out/run.h5" --min-steps 4 || fail "check_run"
"$CHECK_RL" "$out/run.h5" --max-staleness 2 --accuracy-rises || fail "check_rl"
[ -n "${KEEP:-}" ] || rm -rf "$out"
