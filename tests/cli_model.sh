#!/bin/sh
# The model commands end to end on a shipped model file: `libra score` prints one
# log-prob per scored token (each <= 0) and refuses bad token files with a clear
# message; `libra logits` writes its file and checks its arguments; `libra generate` is
# deterministic when greedy or seeded and rejects bad options; usage errors of
# generate and libra-sim, a missing config outside mpirun.
. "$(dirname "$0")/mpi_common.sh"
out=$(scratch cli)
model="$top_srcdir/tests/golden/qwen3-gqa-tied.model.h5"

printf '1 2 3\n4 5 6 7 8 9 10\n' > "$out/toks"
"$LIBRA" score "$model" "$out/toks" > "$out/score" || fail "score exited non-zero"
[ "$(wc -l < "$out/score")" = 9 ] || fail "score: expected 9 lines for 10 tokens"
awk '$1 > 0 || $1 !~ /^-?[0-9.]+$/ { bad = 1 } END { exit bad }' "$out/score" \
    || fail "score: a value is not a log-probability"

printf '1 2 300\n' > "$out/bad"
if "$LIBRA" score "$model" "$out/bad" 2> "$out/err"; then fail "score accepted token 300"; fi
grep -q "token 3: '300' is not a token id in \[0, 300)" "$out/err" || fail "score: unclear message"
if "$LIBRA" score "$out/toks" "$out/toks" 2> "$out/err"; then fail "score accepted a non-model"; fi
grep -q "not an HDF5 file" "$out/err" || fail "score: unclear message for a non-HDF5 model"

"$LIBRA" logits "$model" "$out/toks" "$out/logits.h5" > /dev/null || fail "logits exited non-zero"
[ -s "$out/logits.h5" ] || fail "logits wrote no file"
if "$LIBRA" logits "$model" "$out/toks" 2> "$out/err"; then fail "logits accepted 2 arguments"; fi
grep -q "usage: libra logits" "$out/err" || fail "logits: no usage message"
if "$LIBRA" logits "$model" "$out/bad" "$out/l2.h5" 2> /dev/null; then fail "logits accepted token 300"; fi

"$LIBRA" generate "$model" --prompt "Hi <tool_call>" --max-new 12 > "$out/g1" || fail "generate"
"$LIBRA" generate "$model" --prompt "Hi <tool_call>" --max-new 12 > "$out/g2" || fail "generate"
cmp -s "$out/g1" "$out/g2" || fail "greedy generate is not deterministic"
"$LIBRA" generate "$model" --prompt-tokens "$out/toks" --temperature 1 --top-p 0.9 --seed 5 \
    --max-new 12 > "$out/s1" || fail "generate --prompt-tokens"
"$LIBRA" generate "$model" --prompt-tokens "$out/toks" --temperature 1 --top-p 0.9 --seed 5 \
    --max-new 12 > "$out/s2" || fail "generate --prompt-tokens"
cmp -s "$out/s1" "$out/s2" || fail "seeded generate is not deterministic"
if "$LIBRA" generate "$model" --top-p 0 2> /dev/null; then fail "generate accepted --top-p 0"; fi
# sizes are bounded by what the model can do: its context, with the bound in the message
rc=0; "$LIBRA" generate "$model" --prompt "Hi" --max-new 100000 > /dev/null 2> "$out/err" || rc=$?
[ $rc = 2 ] && grep -q "exceed the model's context of [0-9]* tokens.*use --max-new [0-9]* or less" "$out/err" \
    || { cat "$out/err"; fail "generate --max-new beyond the context: exit $rc"; }
rc=0; "$LIBRA" generate "$model" --prompt "Hi" --temperature nan > /dev/null 2> "$out/err" || rc=$?
[ $rc = 2 ] || { cat "$out/err"; fail "generate accepted --temperature nan"; }
# usage errors say so (exit 2 and a usage line), and so does a missing config run
# without mpirun (the config's error, not the rank count)
rc=0; "$LIBRA" generate > /dev/null 2> "$out/err" || rc=$?
[ $rc = 2 ] && grep -q "^usage: libra generate MODEL" "$out/err" || fail "generate without a model: exit $rc"
"$top_builddir/src/libra-sim" --version | grep -q "^libra-sim [0-9]" || fail "libra-sim --version"
if "$LIBRA" "$out/no-such.cfg" > /dev/null 2> "$out/err"; then fail "a missing config ran"; fi
grep -q "no-such.cfg: cannot read" "$out/err" || { cat "$out/err"; fail "a missing config outside mpirun: unclear message"; }
echo "ok: score, logits and generate"
[ -n "${KEEP:-}" ] || rm -rf "$out"
