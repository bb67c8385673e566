#!/bin/sh
# RL on the CUDA device, the calc environment and the shipped model, fifteen times: 4
# ranks (controller, 2 training replicas, 1 rollout instance, all TP 1; top-k and top-p
# sampling); 5 ranks (controller, one TP-2 training replica, one TP-2 rollout
# instance: the GPU engine's shards and their all-reduces, top-k sampling); 6 ranks with a TP-4
# replica (the kv heads replicated, their gradients summed over kv groups on the
# GPUs); 6 ranks with a lent TP-2 replica from the first step; 5 ranks re-planned
# every 3 steps (1 replica + TP [1, 1, 1], 2 replicas + TP [2], 1 replica + TP
# [2, 1]: instances dissolve and form
# again, their GPU groups from the cache or new; with an entropy bonus, whose gradient
# the GPU forms at TP 1 and 2); a rollout rank lent to training for two epochs, which
# must give its GPU trainer's memory back when it serves rollouts again; and the
# global resource planner with the pool, plan.mode = "grp"; train.colocate against the
# split layout on the same data, and the split one with float32 weight syncs against
# its bf16 ones and started from a Hugging Face directory against the .h5 file;
# training replicas whose TP changes, up and down, each against the same plan without
# the change), on the node's GPUs (one GPU serves every worker if
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
export RL_DEVICE=cuda
# (nucleus sampling over the top 40: the instance samples on the GPU with top-k and top-p)
RL_ROLLOUT_EXTRA="top_k = 40; top_p = 0.95;" rl_config "$out/run.cfg" "$out/run.h5" 4 2 1 2 2
rl_job 4 "$out/run.cfg" "$out/run"
tail -n 3 "$out/run.stdout"
"$CHECK_RUN" "$out/run.h5" --min-steps 4 || fail "check_run"
"$CHECK_RL" "$out/run.h5" --max-staleness 2 --accuracy-rises || fail "check_rl"
# tensor parallel: a TP-2 replica and a TP-2 instance
# (top-k 40: the instance's two ranks exchange their candidates on the GPUs)
RL_ROLLOUT_EXTRA="top_k = 40;" RL_PLAN_EXTRA="train_tp = 2;" \
    rl_config "$out/tp.cfg" "$out/tp.h5" 4 2 2 2 2
rl_job 5 "$out/tp.cfg" "$out/tp"
tail -n 3 "$out/tp.stdout"
"$CHECK_RUN" "$out/tp.h5" --min-steps 4 || fail "check_run (TP 2)"
"$CHECK_RL" "$out/tp.h5" --max-staleness 2 --accuracy-rises || fail "check_rl (TP 2)"
# a TP-4 replica: the model's 2 kv heads replicated over its 4 ranks, their gradients
# summed over each kv group on the GPUs (6 ranks)
RL_PLAN_EXTRA="train_tp = 4;" rl_config "$out/tp4.cfg" "$out/tp4.h5" 6 4 1 2 2
rl_job 6 "$out/tp4.cfg" "$out/tp4"
tail -n 3 "$out/tp4.stdout"
"$CHECK_RUN" "$out/tp4.h5" --min-steps 6 || fail "check_run (TP 4)"
"$CHECK_RL" "$out/tp4.h5" --max-staleness 2 --accuracy-rises || fail "check_rl (TP 4)"
# a lent TP-2 replica from the first step: its partners make their GPU trainers to
# serve the join (they have not trained yet) and every step trains on both replicas
rl_sched_config "$out/lent2.cfg" "$out/lent2.h5" 6 3 \
    '{ n_train = 2; train_tp = 2; n_hybrid = 2; rollout_tp = [1]; }'
rl_job 6 "$out/lent2.cfg" "$out/lent2"
"$CHECK_RUN" "$out/lent2.h5" --min-steps 6 || fail "check_run (lent from the start)"
"$CHECK_RL" "$out/lent2.h5" --min-hybrid-steps 3 || fail "check_rl (lent from the start)"
# re-planned: roles and TP layouts change between epochs
RL_TRAIN_EXTRA="entropy_coef = 0.01;" rl_sched_config "$out/replan.cfg" \
    "$out/replan.h5" 9 3 '{ n_train = 1; rollout_tp = [1, 1, 1]; },
    { n_train = 2; rollout_tp = [2]; }, { n_train = 1; rollout_tp = [2, 1]; }'
rl_job 5 "$out/replan.cfg" "$out/replan"
tail -n 3 "$out/replan.stdout"
"$CHECK_RUN" "$out/replan.h5" --min-steps 9 || fail "check_run (re-planned)"
"$CHECK_RL" "$out/replan.h5" --max-staleness 0 || fail "check_rl (re-planned)"
# the same with GPU-to-GPU syncs (host-staged): in epoch 2 the TP-1 instance's rank
# feeds both ranks of the TP-2 instance their shards (packing o_proj's and down_proj's
# column halves on its GPU), and the senders send the TP-1 rank alone; every sync
# checked end to end (train.verify_syncs: the weights each GPU model installed
# against its senders')
RL_LOG_LEVEL=info RL_TRAIN_EXTRA="entropy_coef = 0.01; verify_syncs = 1;" \
    rl_sched_config "$out/replangpu.cfg" \
    "$out/replangpu.h5" 9 3 '{ n_train = 1; rollout_tp = [1, 1, 1]; },
    { n_train = 2; rollout_tp = [2]; }, { n_train = 1; rollout_tp = [2, 1]; }'
LIBRA_TEST_SYNC_GPU=host rl_job 5 "$out/replangpu.cfg" "$out/replangpu"
"$CHECK_RUN" "$out/replangpu.h5" --min-steps 9 || fail "check_run (re-planned, GPU syncs)"
"$CHECK_RL" "$out/replangpu.h5" --max-staleness 0 || fail "check_rl (re-planned, GPU syncs)"
grep -q "epoch 2: bf16 weight syncs GPU to GPU" "$out/replangpu.stdout" ||
    fail "rl_cuda: no GPU-to-GPU weight syncs in the epoch of TP [2, 1]"
# (Not compared with replan: two data-parallel replicas make the training figures
# depend on the order trajectories arrive in, in the last bits.)
# lent and back: one rollout rank trains for two epochs, then serves rollouts again.
# On the host stand-in the workers' GPU is too small for a GPU trainer (125 MB) and a
# rollout engine (69 MB; at least one slot's KV cache) at once (LIBRA_CUDA_HOST_MEM
# 135 MB; rank 0 keeps the default for its start-up measurement), so the rank must
# hand its trainer's GPU memory back when it returns to rollout, else its rollout
# engine does not fit and the job ends. On a GPU the budget does not apply. The weight
# syncs go GPU to GPU (host-staged: LIBRA_TEST_SYNC_GPU=host) in every epoch, the one
# after the loan (epoch 3: the two lent entries are one epoch) included: the rank back
# from it has given its trainer up, its weights its shard's again (train.verify_syncs
# checks each sync's weights end to end).
cat > "$out/budget" <<SH
#!/bin/sh
[ "\${OMPI_COMM_WORLD_RANK:-0}" = 0 ] || export LIBRA_CUDA_HOST_MEM=135000000
exec "$LIBRA" "\$@"
SH
chmod +x "$out/budget"
lent='{ n_train = 1; n_hybrid = 1; rollout_tp = [1, 1]; }'
RL_LOG_LEVEL=info RL_TRAIN_EXTRA="verify_syncs = 1;" \
    rl_sched_config "$out/lent.cfg" "$out/lent.h5" 12 3 \
    "{ n_train = 1; rollout_tp = [1, 1, 1]; }, $lent, $lent, { n_train = 1; rollout_tp = [1, 1, 1]; }"
LIBRA="$out/budget" LIBRA_TEST_SYNC_GPU=host rl_job 5 "$out/lent.cfg" "$out/lent"
tail -n 3 "$out/lent.stdout"
"$CHECK_RUN" "$out/lent.h5" --min-steps 12 || fail "check_run (lent)"
"$CHECK_RL" "$out/lent.h5" --max-staleness 0 || fail "check_rl (lent)"
grep -q "joined training" "$out/lent.stdout" || fail "rl_cuda: the lent rank never joined training"
grep -q "epoch 3: bf16 weight syncs GPU to GPU" "$out/lent.stdout" ||
    fail "rl_cuda: no GPU-to-GPU weight syncs in the epoch after the loan"
# train.colocate (verl's sync-colocated baseline): 3 ranks each a TP-1 rollout instance
# and a training replica, on-policy, against the same data on 1 training rank and 2
# rollout instances. Colocated ranks train, refresh their rollout engine from their own
# weights and learn. On the host stand-in the first two steps' rollouts agree exactly
# (the first decodes the initial weights; the second weights that differ in their last
# bits) and their training figures within 1e-2, and after them, with checkpoints
# every 2 steps, the weights within 1e-3 and the AdamW moments within 1e-2 of their
# largest values (measured 1.3e-3 and 2.0e-3): the replicas' bf16 matrix products
# round their shares of the batch differently from one trainer's whole batch (on
# device cpu, float32 throughout, both agree within 1e-4: rl_cpu_colocate.sh). Later a
# token sampled near a tie may flip, the two runs' batches part, and only the final
# weights are compared (1e-3). A stale trainer state at the weight swap (the AdamW
# moments uploaded again from the host) moves the step-2 moments far past 1e-2. On a
# GPU the decode batches differ in size between the two layouts, and cuBLASLt may pick
# another algorithm for another shape: compared on the stand-in only.
for run in colo split; do
    if [ $run = colo ]; then RL_TRAIN_EXTRA="colocate = 1;" n=3 tp="1, 1, 1"
    else RL_TRAIN_EXTRA="" n=1 tp="1, 1"; fi
    rl_config "$out/$run.cfg" "$out/$run.h5" 6 $n "$tp" 0 1 \
        "checkpoint_interval = 2; checkpoint_keep = 3; checkpoint_dir = \"$out/ckpt-$run\";"
    rl_job 4 "$out/$run.cfg" "$out/$run"
done
RL_TRAIN_EXTRA=""
"$CHECK_RUN" "$out/colo.h5" --min-steps 6 || fail "check_run (colocated)"
"$CHECK_RL" "$out/colo.h5" --max-staleness 0 --colocated --accuracy-rises || fail "check_rl (colocated)"
if [ "${LIBRA_CUDA_MODULE:-}" = host ]; then
    "$CHECK_RL" --compare "$out/split.h5" "$out/colo.h5" --rel-tol 1e-2 --rows 2 ||
        fail "check_rl --compare split colo (the first 2 steps)"
    "$CHECK_RL" --compare-models "$out/ckpt-split/step-00000002/model.h5" \
        "$out/ckpt-colo/step-00000002/model.h5" --rel-tol 1e-3 --moments 1e-2 ||
        fail "check_rl --compare-models split colo (step 2, with the moments)"
    "$CHECK_RL" --compare-models "$out/ckpt-split/step-00000006/model.h5" \
        "$out/ckpt-colo/step-00000006/model.h5" --rel-tol 1e-3 ||
        fail "check_rl --compare-models split colo (step 6)"
fi
# the weight syncs carry bf16 to the rollout ranks (the weights their engines decode,
# bit for bit): the split run again with float32 syncs (LIBRA_TEST_SYNC_F32) moves
# twice the bytes and, on the host stand-in, gives the same run exactly -- every
# step's figures, the eval, the final weights. Not on a GPU: which rows share a decode
# step depends on timing there, and cuBLASLt's result for a row on the batch's row
# count, so two runs of one config differ in last bits from the first step (an H100:
# losses 1e-9 apart).
rl_config "$out/split32.cfg" "$out/split32.h5" 6 1 "1, 1" 0 1 \
    "checkpoint_interval = 2; checkpoint_keep = 3; checkpoint_dir = \"$out/ckpt-split32\";"
export LIBRA_TEST_SYNC_F32=1
rl_job 4 "$out/split32.cfg" "$out/split32"
unset LIBRA_TEST_SYNC_F32
# same_as_split RUN WHAT: on the host stand-in, RUN is the split run exactly: every
# step's figures, the eval, the step-6 weights and AdamW moments
same_as_split() {
    [ "${LIBRA_CUDA_MODULE:-}" = host ] || return 0
    "$CHECK_RL" --compare "$out/split.h5" "$out/$1.h5" --rel-tol 0 ||
        fail "check_rl --compare split $1 ($2)"
    "$CHECK_RL" --compare-models "$out/ckpt-split/step-00000006/model.h5" \
        "$out/ckpt-$1/step-00000006/model.h5" --rel-tol 0 --moments 0 ||
        fail "check_rl --compare-models split $1 ($2)"
}
same_as_split split32 "bf16 and float32 syncs"
python=${PYTHON:-/usr/bin/python3} # with h5py (tools/setup-test)
"$python" - "$out/split.h5" "$out/split32.h5" <<'PY' || fail "bf16 syncs: not half the bytes"
import sys
import h5py
b16, b32 = (h5py.File(f, "r")["steps"]["sync_bytes"][:] for f in sys.argv[1:])
assert len(b16) == len(b32) and b32.sum() > 0, (b16, b32)
assert (2 * b16 == b32).all(), (b16, b32)
print("ok: bf16 syncs moved %d bytes, float32 %d" % (b16.sum(), b32.sum()))
PY
# started from a Hugging Face directory of the same weights (float32 safetensors): the
# rollout ranks read their shards' slices as bf16 straight for their GPU models
# (rounded as the GPU rounds a float32 upload), the training rank as float32. On the
# host stand-in the same run as from the .h5 file, exactly.
"$LIBRA" export "$LIBRA_INPUTS/$RL_MODEL" "$out/hf-f32" --dtype f32 > "$out/export.log" ||
    fail "libra export --dtype f32"
RL_MODEL="$out/hf-f32" RL_MODEL_EXTRA="chat_format = \"libra\";" RL_LOG_LEVEL=info \
    rl_config "$out/splithf.cfg" "$out/splithf.h5" 6 1 "1, 1" 0 1 \
    "checkpoint_interval = 2; checkpoint_keep = 3; checkpoint_dir = \"$out/ckpt-splithf\";"
rl_job 4 "$out/splithf.cfg" "$out/splithf"
[ "$(grep -c 'read as bf16 for the GPU' "$out/splithf.stdout")" = 2 ] ||
    fail "rl_cuda: the 2 rollout ranks did not read their shards as bf16"
same_as_split splithf "from the .h5 file, from a Hugging Face directory"
# GPU to GPU: the bf16 syncs from the trainer's GPU into the rollout ranks' GPU models
# (NCCL where every rank has a GPU of its own; here carried host-staged over MPI,
# LIBRA_TEST_SYNC_GPU=host, which runs the whole path but the NCCL calls): on the host
# stand-in the same run as the split one, exactly, moving the same bytes.
RL_LOG_LEVEL=info rl_config "$out/splitgpu.cfg" "$out/splitgpu.h5" 6 1 "1, 1" 0 1 \
    "checkpoint_interval = 2; checkpoint_keep = 3; checkpoint_dir = \"$out/ckpt-splitgpu\";"
LIBRA_TEST_SYNC_GPU=host rl_job 4 "$out/splitgpu.cfg" "$out/splitgpu"
grep -q "bf16 weight syncs GPU to GPU" "$out/splitgpu.stdout" ||
    fail "rl_cuda: LIBRA_TEST_SYNC_GPU=host: the syncs did not go GPU to GPU"
same_as_split splitgpu "MPI and GPU-to-GPU weight syncs"
"$python" - "$out/split.h5" "$out/splitgpu.h5" <<'PY' || fail "GPU-to-GPU syncs: other byte counts"
import sys
import h5py
a, b = (h5py.File(f, "r")["steps"]["sync_bytes"][:] for f in sys.argv[1:])
assert len(a) == len(b) and a.sum() > 0 and (a == b).all(), (a, b)
PY
# the training replicas change their TP degree, from 2 of TP 1 to one of TP 2 (up) and
# back (down): the whole training state gathered and re-cut, the GPU trainers' moments
# with it. Each against the same run without the change (the same plan throughout),
# identical up to it: on the stand-in the steps before the change and the first step
# after it (its rollouts decode the last weights both runs share) agree exactly but for
# their training figures (within 2e-2: bf16 products over TP 2 shards against two
# replicas'), and after that first step the weights within 1e-3 and the AdamW moments
# within 1e-2 of their largest values. A cut that loses the moments (zeroed) or
# misplaces a shard moves them far past that. Later steps are not compared: weights
# that differ in their last bits may flip a token sampled near a tie.
tp1='{ n_train = 2; rollout_tp = [1, 1]; }'
tp2='{ n_train = 2; train_tp = 2; rollout_tp = [1, 1]; }'
for run in same1 up same2 down; do
    case $run in
        same1) sched="$tp1" ;;
        up) sched="$tp1, $tp2" ;;
        same2) sched="$tp2" ;;
        down) sched="$tp2, $tp1" ;;
    esac
    RL_LOG_LEVEL=info rl_sched_config "$out/$run.cfg" "$out/$run.h5" 6 4 "$sched" \
        "checkpoint_interval = 1; checkpoint_keep = 2; checkpoint_dir = \"$out/ckpt-$run\";"
    rl_job 5 "$out/$run.cfg" "$out/$run"
done
grep -q "epoch 1: train 2 (replicas of TP 2 x PP 1)" "$out/up.stdout" ||
    fail "rl_cuda: the plan with replicas of TP 2 was not applied"
grep -q "epoch 1: train 2, hybrid 0" "$out/down.stdout" ||
    fail "rl_cuda: the plan with replicas of TP 1 was not applied"
for pair in "same1 up" "same2 down"; do
    set -- $pair
    "$CHECK_RL" "$out/$2.h5" --max-staleness 0 || fail "check_rl ($2)"
    [ "${LIBRA_CUDA_MODULE:-}" = host ] || continue
    "$CHECK_RL" --compare "$out/$1.h5" "$out/$2.h5" --rel-tol 2e-2 --rows 5 ||
        fail "check_rl --compare $1 $2 (the first 5 steps)"
    "$CHECK_RL" --compare-models "$out/ckpt-$1/step-00000005/model.h5" \
        "$out/ckpt-$2/step-00000005/model.h5" --rel-tol 1e-3 --moments 1e-2 ||
        fail "check_rl --compare-models $1 $2 (step 5, with the moments)"
done
# the global resource planner on the GPU engine: it plans with the cost model the
# device measured at start-up, calibrates on the measured steps, and may move ranks
# between roles and rollout TP layouts (1 or 2), with the elastic pool on. On the
# host stand-in it does move them; on an H100 it kept its first plan through the 16
# steps, so on a GPU a move is not required, only a planned, complete run.
cat > "$out/grp.cfg" <<CFG
run = { name = "rl-grp"; steps = 16; seed = 7; log_level = "info"; progress_interval_s = 5.0; };
device = { type = "cuda"; };
model = { checkpoint = "$RL_MODEL"; };
rollout = { n_samples = 8; max_turns = 4; max_tokens_per_turn = 48; max_tokens = 512; };
train = { batch_size = 96; max_staleness = 1; sync_interval = 1; lr = 5e-5; };
plan = { mode = "grp"; max_train_tp = 1; max_train_pp = 1; pool = 1; max_rollout_tp = 2; };
workload = { preset = "workloads/calc.cfg"; };
env = { name = "calc"; };
eval = { size = 16; interval = 0; };
output = { file = "$out/grp.h5"; };
CFG
rl_job 6 "$out/grp.cfg" "$out/grp"
grep '^\[rank 0\] \(epoch\|pool\)' "$out/grp.stdout" | head -n 8
# the planner's reasons, step by step (why it moved or kept the plan: on an H100 it
# kept its first plan through all 16 steps, and only this table can say why)
"$python" - "$out/grp.h5" <<'PY' || fail "grp: the /planner table does not read"
import sys
import h5py
f = h5py.File(sys.argv[1], "r")
p = f["planner"][:]
name = {}
for col in ("trigger", "verdict"):
    name[col] = {v: k for k, v in h5py.check_enum_dtype(p.dtype[col]).items()}
print("step trigger verdict candidate cand_step_s cur_step_s gain_s transition_s "
      "meas_train_s meas_rollout_s scale_train scale_rollout")
for r in p:
    print(r["step"], name["trigger"][r["trigger"]], name["verdict"][r["verdict"]],
          "%d+%s" % (r["cand_train"], r["cand_rollout_tp"].decode() or "-"),
          *("%.4g" % r[c] for c in ("cand_step_s", "cur_step_s", "gain_s", "transition_s",
                                    "meas_train_s", "meas_rollout_s", "scale_train",
                                    "scale_rollout")))
PY
"$CHECK_RL" "$out/grp.h5" || fail "check_rl (grp)"
moves="--min-replans 1 --expect-event planner"
[ "${LIBRA_CUDA_MODULE:-}" = host ] || moves=""
"$CHECK_RUN" "$out/grp.h5" --min-steps 16 --planner $moves || fail "check_run (grp)"
[ -n "${KEEP:-}" ] || rm -rf "$out"
