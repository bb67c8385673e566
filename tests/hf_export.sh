#!/bin/sh
# `libra export` end to end: a model file becomes a Hugging Face directory that libra
# loads back (score within bf16 rounding of the original, and exactly the same after a
# second bf16 export, whose weights file is byte-identical); shards past
# --max-shard-size; a checkpoint root exports its newest complete checkpoint and the
# card names the step; --tokenizer copies the tokenizer files and their token ids; a
# model that libra sft trained, and the checkpoint of an RL run (3 ranks) that started,
# from a Hugging Face directory export with that directory's tokenizer and the run's
# name (the libra_hf_source tag). Refusals: an
# OUTDIR holding a model, a non-empty or non-directory OUTDIR, a bad dtype or size,
# an input that is no model; none leaves a temporary directory behind.
. "$(dirname "$0")/mpi_common.sh"
out=$(scratch hf_export)
model="$top_srcdir/tests/golden/qwen3-gqa-tied.model.h5"
printf '1 2 3 4 5 6 7 8\n' > "$out/toks"

"$LIBRA" export "$model" "$out/hf" > /dev/null || fail "export of a model file"
for f in model.safetensors config.json README.md; do
    [ -f "$out/hf/$f" ] || fail "export: no $f"
done
[ ! -e "$out/hf/generation_config.json" ] || fail "export: token ids made up"
grep -q '"model_type": "qwen3"' "$out/hf/config.json" || fail "config.json: model_type"
grep -q '"torch_dtype": "bfloat16"' "$out/hf/config.json" || fail "config.json: torch_dtype"
grep -q "Exported by libra .* (source checkpoint \`.*qwen3-gqa-tied.model.h5\`)" \
    "$out/hf/README.md" || fail "README.md: no provenance line"

# loads back: scores within bf16 rounding; a second export is byte-identical
"$LIBRA" score "$model" "$out/toks" > "$out/s-h5" || fail "score of the model file"
"$LIBRA" score "$out/hf" "$out/toks" > "$out/s-hf" || fail "score of the exported directory"
paste "$out/s-h5" "$out/s-hf" | awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 0.05) bad = 1 }
    END { exit bad }' || fail "scores of the bf16 export differ from the model's by > 0.05"
"$LIBRA" export "$out/hf" "$out/hf2" > /dev/null || fail "re-export of the HF directory"
cmp -s "$out/hf/model.safetensors" "$out/hf2/model.safetensors" \
    || fail "bf16 -> bf16 re-export changed the weights file"
"$LIBRA" export "$out/hf" "$out/sharded" --max-shard-size 20KB > /dev/null || fail "sharded"
[ -f "$out/sharded/model.safetensors.index.json" ] || fail "sharded: no index"
[ "$(ls "$out/sharded"/model-0000*-of-0000*.safetensors | wc -l)" -ge 2 ] \
    || fail "sharded: fewer than 2 shards"
"$LIBRA" score "$out/sharded" "$out/toks" > "$out/s-sh" || fail "score of the shards"
cmp -s "$out/s-hf" "$out/s-sh" || fail "the shards score differently from one file"
"$LIBRA" export "$model" "$out/f32" --dtype f32 > /dev/null || fail "f32 export"
"$LIBRA" score "$out/f32" "$out/toks" > "$out/s-f32" || fail "score of the f32 export"
cmp -s "$out/s-h5" "$out/s-f32" || fail "the f32 export scores differently from the model"

# a checkpoint root: its newest complete checkpoint, and the card says which step
root="$out/run-ckpt"
for s in 00000003 00000007; do
    mkdir -p "$root/step-$s"
    cp "$model" "$root/step-$s/model.h5"
    printf 'libra checkpoint\nstep %d\nversion 1\n' "$((1$s - 100000000))" > "$root/step-$s/COMPLETE"
done
mkdir -p "$root/step-00000009" && cp "$model" "$root/step-00000009/model.h5" # no mark
"$LIBRA" export "$root" "$out/from-root" > "$out/log" 2>&1 || { cat "$out/log"; fail "root"; }
grep -q "at step 7 " "$out/from-root/README.md" || fail "README.md: not step 7"
"$LIBRA" export "$root/step-00000003" "$out/from-step" > /dev/null || fail "step directory"
grep -q "at step 3 " "$out/from-step/README.md" || fail "README.md: not step 3"

# --tokenizer: the files and the ids of its generation_config.json
tok="$out/tok"
mkdir -p "$tok"
echo '{"model": {"type": "BPE"}}' > "$tok/tokenizer.json"
echo '{"bos_token": "<s>"}' > "$tok/tokenizer_config.json"
printf 'a b\n' > "$tok/merges.txt"
echo '{"bos_token_id": 1, "eos_token_id": [2, 3]}' > "$tok/generation_config.json"
"$LIBRA" export "$model" "$out/with-tok" --tokenizer "$tok" > /dev/null || fail "--tokenizer"
for f in tokenizer.json tokenizer_config.json merges.txt; do
    cmp -s "$tok/$f" "$out/with-tok/$f" || fail "--tokenizer: $f not copied"
done
grep -q '"bos_token_id": 1' "$out/with-tok/generation_config.json" || fail "bos id"
grep -q '"bos_token_id": 1' "$out/with-tok/config.json" || fail "config.json: bos id"
tr -d ' \n' < "$out/with-tok/generation_config.json" | grep -q '"eos_token_id":\[2,3\]' \
    || fail "eos ids"

# the HF source recorded by a run: sft from a Hugging Face directory, export its output
"$LIBRA" --write-random-hf "$out/base" --shape tiny > /dev/null || fail "--write-random-hf"
cp "$tok"/tokenizer.json "$tok"/tokenizer_config.json "$out/base/"
cat > "$out/sft.cfg" <<CFG
run = { name = "sft-from-hf"; seed = 1; };
device = { type = "cpu"; };
model = { checkpoint = "$out/base"; chat_format = "libra"; }; # a byte-level model
env = { name = "calc"; };
rollout = { max_turns = 1; max_tokens_per_turn = 4; max_tokens = 256; };
sft = { steps = 1; batch_size = 2; warmup_steps = 0; eval_interval = 1; eval_size = 1;
        out = "$out/sft.h5"; };
CFG
"$LIBRA" sft "$out/sft.cfg" > "$out/sft.log" 2>&1 || { cat "$out/sft.log"; fail "sft from HF"; }
"$LIBRA" export "$out/sft.h5" "$out/from-sft" > /dev/null || fail "export of sft.out"
cmp -s "$tok/tokenizer.json" "$out/from-sft/tokenizer.json" \
    || fail "the tokenizer of the source HF directory was not copied"
grep -q 'from run `sft-from-hf`' "$out/from-sft/README.md" || fail "README.md: run name"

# a run that starts from a Hugging Face directory: its checkpoints record it, and the
# export of the checkpoint root takes the tokenizer from there, with the run's name
. "$(dirname "$0")/rl_common.sh"
"$LIBRA" export "$LIBRA_INPUTS/$RL_MODEL" "$out/calc-hf" --dtype f32 > /dev/null \
    || fail "export of $RL_MODEL"
grep -q '"bos_token_id": 256' "$out/calc-hf/generation_config.json" \
    || fail "byte-level model: no bos id"
cp "$tok/tokenizer.json" "$out/calc-hf/"
RL_MODEL="$out/calc-hf"
RL_MODEL_EXTRA='chat_format = "libra";' # the byte-level model behind a stand-in tokenizer
rl_config "$out/run.cfg" "$out/run.h5" 2 1 "1" 1 1 \
    "checkpoint_interval = 2; checkpoint_dir = \"$out/run-ckpt2\";"
rl_job 3 "$out/run.cfg" "$out/run"
"$LIBRA" export "$out/run-ckpt2" "$out/from-run" > /dev/null || fail "export of the run"
grep -q 'from run `rl-test` at step 2 ' "$out/from-run/README.md" || fail "run card"
cmp -s "$tok/tokenizer.json" "$out/from-run/tokenizer.json" || fail "run: tokenizer not copied"

# refusals
expect_fail() { # WANT ARGS...
    want=$1
    shift
    if "$LIBRA" export "$@" > /dev/null 2> "$out/err"; then fail "export $* succeeded"; fi
    grep -q -- "$want" "$out/err" || { cat "$out/err"; fail "export $*: no '$want'"; }
}
expect_fail "already holds a model: refusing to overwrite" "$model" "$out/hf"
echo x > "$out/notdir"
expect_fail "is not a directory" "$model" "$out/notdir"
mkdir -p "$out/busy" && echo x > "$out/busy/notes.txt"
expect_fail "is not empty" "$model" "$out/busy"
expect_fail "expected bf16, f16 or f32" "$model" "$out/x" --dtype f8
expect_fail "positive size" "$model" "$out/x" --max-shard-size 0
expect_fail "no tokenizer files" "$model" "$out/x" --tokenizer "$out/busy"
expect_fail "not an HDF5 file" "$out/toks" "$out/x"
expect_fail "neither config.json" "$out/busy" "$out/x"
expect_fail "usage: libra export" "$model"
mkdir -p "$out/empty-out"
"$LIBRA" export "$model" "$out/empty-out" > /dev/null || fail "export into an empty directory"
[ -f "$out/empty-out/model.safetensors" ] || fail "empty OUTDIR: no model"
[ -z "$(ls -d "$out"/*.tmp-* 2> /dev/null)" ] || fail "a temporary directory was left behind"
echo "ok: libra export"
[ -n "${KEEP:-}" ] || rm -rf "$out"
