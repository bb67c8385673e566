#!/bin/sh
# tools/sass-mix's reader (tools/sass_blocks.py) on a small disassembly in nvdisasm's
# form: the kernel picked by its pattern, its registers from ptxas's log, its blocks cut
# at labels and branches, a loop's closing block named, the tensor-core products
# counted, blocks under MIN left out; and a pattern that matches no kernel refused.
# (tools/sass-mix itself needs Debian's non-free toolkit from the network: not here.)
set -u
top=${top_srcdir:-$(cd "$(dirname "$0")/.." && pwd)}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/k.sass" << 'EOF'
	.section	.text._Z5otherv,"ax",@progbits
        /*0000*/                   EXIT ;
	.section	.text._Z6tile_kILi128EEvPf,"ax",@progbits
        .text._Z6tile_kILi128EEvPf:
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   S2R R0, SR_TID.X ;
.L_x_1:
        /*0020*/                   LDSM.16.M88.4 R4, [R2] ;
        /*0030*/                   HMMA.16816.F32.BF16 R8, R4, R6, R8 ;
        /*0040*/                   HMMA.16816.F32.BF16 R12, R4, R7, R12 ;
        /*0050*/                   FMNMX R3, R8, R9, !PT ;
        /*0060*/              @!P0 FMUL R8, R8, 0.5 ;
        /*0070*/                   ISETP.NE.AND P0, PT, R0, RZ, PT ;
        /*0080*/               @P0 BRA `(.L_x_1) ;
        /*0090*/                   STG.E [R10.64], R8 ;
        /*00a0*/                   EXIT ;
EOF
cat > "$tmp/ptxas.log" << 'EOF'
ptxas info    : Compiling entry function '_Z5otherv' for 'sm_90'
ptxas info    : Used 8 registers, 352 bytes cmem[0]
ptxas info    : Compiling entry function '_Z6tile_kILi128EEvPf' for 'sm_90'
ptxas info    : Function properties for _Z6tile_kILi128EEvPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 174 registers, 360 bytes cmem[0]
EOF
fail() {
    echo "sass_mix: $1"
    cat "$tmp/out"
    exit 1
}
/usr/bin/python3 "$top/tools/sass_blocks.py" "$tmp/k.sass" "$tmp/ptxas.log" 'tile_kILi128' 3 > "$tmp/out" 2>&1 ||
    fail "the reader failed"
grep -q '^_Z6tile_kILi128EEvPf: 11 instructions, 174 registers$' "$tmp/out" || fail "the kernel's line"
grep -q '_Z5otherv' "$tmp/out" && fail "a kernel the pattern does not match is listed"
grep -Eq '^  \.L_x_1 +7 \(3\.50 an HMMA\) loop to \.L_x_1: HMMA 2 ' "$tmp/out" || fail "the loop's block"
grep -q 'FMUL 1' "$tmp/out" || fail "a predicated instruction's opcode"
grep -Eq '^  (entry|\.L_x_1\+) ' "$tmp/out" && fail "a block under MIN is listed"
/usr/bin/python3 "$top/tools/sass_blocks.py" "$tmp/k.sass" "$tmp/ptxas.log" 'tile_kILi128' 1 > "$tmp/out" 2>&1 ||
    fail "the reader failed"
grep -Eq '^  entry +2: MOV 1 S2R 1$' "$tmp/out" || fail "the entry block"
grep -Eq '^  \.L_x_1\+ +2: STG 1 EXIT 1$' "$tmp/out" || fail "the block after the branch"
if /usr/bin/python3 "$top/tools/sass_blocks.py" "$tmp/k.sass" "$tmp/ptxas.log" 'no_such_k' 1 > "$tmp/out" 2>&1; then
    fail "a pattern matching no kernel was accepted"
fi
grep -q "no kernel matches 'no_such_k'" "$tmp/out" || fail "the refusal's message"
echo "sass_mix: OK"
