#!/bin/sh
# RL on the CUDA device, the calc environment and the shipped model, twice: 4 ranks
# (controller, 2 training replicas, 1 rollout instance, all TP 1), then 5 ranks
# (controller, one TP-2 training replica, one TP-2 rollout instance: the GPU engine's
# shards and their all-reduces), on the node's GPUs (one GPU serves every worker if
# there is only one). The rollout instances decode on the GPU engine, the replicas run
# their forwards and backwards on the GPU training path; after every step the
# replicas' parameter hashes must agree, the staleness bound must hold, the run must
# complete with rewards recorded, and the held-out greedy accuracy must rise (an H100
# measured 0.062 -> 0.562 at TP 1). Without the CUDA module or a GPU it
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
# tensor parallel: a TP-2 replica and a TP-2 instance
RL_PLAN_EXTRA="train_tp = 2;" rl_config "$out/tp.cfg" "$out/tp.h5" 4 2 2 2 2
sed -i 's/type = "cpu";/type = "cuda";/' "$out/tp.cfg"
rl_job 5 "$out/tp.cfg" "$out/tp"
tail -n 3 "$out/tp.stdout"
"$CHECK_RUN" "$out/tp.h5" --min-steps 4 || fail "check_run (TP 2)"
"$CHECK_RL" "$out/tp.h5" --max-staleness 2 --accuracy-rises || fail "check_rl (TP 2)"
[ -n "${KEEP:-}" ] || rm -rf "$out"
