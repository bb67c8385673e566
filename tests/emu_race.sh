#!/bin/sh
# The kernels' tests on CPU threads built under ThreadSanitizer (the *_race programs;
# configure builds them where the compiler links -fsanitize=thread and AddressSanitizer
# is off). tests/cuda_block_emu.h makes each CUDA thread a ThreadSanitizer fiber whose
# switches order nothing, and tells it of every barrier, so two threads of a block that
# touch the same memory, one of them writing, with no barrier between, are a data race
# -- whichever runs first, and for a lost update (two read-modify-writes of one
# element) too, which the order-based tests cannot show. The first race stops the
# program with ThreadSanitizer's report (halt_on_error).
set -u
top=${top_builddir:-$(cd "$(dirname "$0")/.." && pwd)}
progs=$(cd "$top/tests" && ls test_cuda_*_race 2>/dev/null)
if [ -z "$progs" ]; then
    echo "emu_race: skipped: not built (configure found no -fsanitize=thread, or" \
         "--enable-sanitizers: ThreadSanitizer cannot join AddressSanitizer)"
    exit 77
fi
out="$top/tests/out/emu_race-$$"
mkdir -p "$out" || exit 1
export TSAN_OPTIONS="halt_on_error=1 ${TSAN_OPTIONS:-}"
fail=0
for t in $progs; do
    log="$out/$t.log"
    if "$top/tests/$t" > "$log" 2>&1; then
        echo "emu_race: $t: $(grep '^ *asserts' "$log" | tr -s ' ')"
    elif grep -q 'ThreadSanitizer: unexpected memory mapping' "$log"; then
        # GCC's ThreadSanitizer runtime cannot map its shadow under a kernel that
        # randomises mmap with more bits than it expects (vm.mmap_rnd_bits > 28)
        echo "emu_race: skipped: ThreadSanitizer cannot run on this kernel ($log):"
        head -3 "$log"
        exit 77
    else
        echo "emu_race: $t failed under ThreadSanitizer ($log):"
        grep -A 12 'WARNING: ThreadSanitizer' "$log" | head -40
        tail -8 "$log"
        fail=1
    fi
done
exit $fail
