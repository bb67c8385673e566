#!/bin/sh
# The kernels' tests on CPU threads once more with every block's threads run backwards
# (LIBRA_EMU_ORDER=reverse; make check runs them forwards): a thread that reads what a
# lower thread writes, with no barrier between, runs ahead of the write only this way
# (tests/cuda_block_emu.h).
set -u
top=${top_builddir:-$(cd "$(dirname "$0")/.." && pwd)}
out="$top/tests/out/emu_reverse-$$"
mkdir -p "$out" || exit 1
fail=0
for t in test_cuda_sampler_emu test_cuda_decode_emu test_cuda_decode_emu_v test_cuda_head_emu \
         test_cuda_core_emu test_cuda_flash_emu test_cuda_flash_emu_v test_cuda_gemv_emu \
         test_cuda_gemv_emu_v; do
    if ! LIBRA_EMU_ORDER=reverse "$top/tests/$t" > "$out/$t.log" 2>&1; then
        echo "emu_reverse: $t failed with its threads backwards ($out/$t.log):"
        tail -20 "$out/$t.log"
        fail=1
    else
        echo "emu_reverse: $t: $(grep '^ *asserts' "$out/$t.log" | tr -s ' ')"
    fi
done
exit $fail
