#!/bin/sh
# `make install` into a staging directory (DESTDIR): the programs, every file of the
# source tree's inputs/ under $(pkgdatadir) unchanged, README and docs/*.md under
# $(docdir), the three man pages (clean under `groff -ww` when groff is here). Then
# the installed programs, run from an empty working directory with LIBRA_INPUTS
# unset, find the shipped inputs in the staged $(pkgdatadir) -- not in the source
# tree -- by the names they have there: `libra --check-config emu-quick.cfg`,
# `libra --describe-workload workloads/r2e-gym.cfg`, `libra-sim emu-quick.cfg`.
set -u
: "${top_srcdir:=$(cd "$(dirname "$0")/.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
fail() {
    echo "FAIL: $*" >&2
    exit 1
}

out="$top_builddir/tests/out/install-$$"
rm -rf "$out" && mkdir -p "$out/stage" "$out/cwd" || fail "cannot make $out"
stage=$(cd "$out/stage" && pwd)
# the install directories as this build's Makefile has them
printf 'print-dirs:\n\t@echo $(bindir) $(pkgdatadir) $(docdir) $(mandir) > "%s"\n' "$out/dirs" |
    make -s -C "$top_builddir" -f Makefile -f - print-dirs > /dev/null 2>&1 ||
    fail "cannot read the install directories from $top_builddir/Makefile"
set -- $(cat "$out/dirs")
bindir=$stage$1 datadir=$stage$2 docdir=$stage$3 mandir=$stage$4

make -s --no-print-directory -C "$top_builddir" install DESTDIR="$stage" \
    > "$out/install.log" 2>&1 || { tail -n 20 "$out/install.log"; fail "make install failed"; }

for p in libra libra-sim; do
    [ -x "$bindir/$p" ] || fail "$bindir/$p was not installed"
done
n=0
for f in $(cd "$top_srcdir/inputs" && find . -type f | sed 's|^\./||'); do
    cmp -s "$top_srcdir/inputs/$f" "$datadir/$f" || fail "inputs/$f is not installed as $datadir/$f"
    n=$((n + 1))
done
[ "$n" -gt 20 ] || fail "only $n files under $top_srcdir/inputs"
for f in README $(cd "$top_srcdir" && ls docs/*.md); do
    cmp -s "$top_srcdir/$f" "$docdir/$f" || fail "$f is not installed as $docdir/$f"
done
for m in man1/libra.1 man1/libra-sim.1 man5/libra.cfg.5; do
    [ -s "$mandir/$m" ] || fail "$mandir/$m was not installed"
    grep -q '@[a-zA-Z]*@' "$mandir/$m" && fail "$mandir/$m has an @name@ left unfilled"
    if command -v groff > /dev/null; then
        w=$(groff -man -ww -z "$mandir/$m" 2>&1)
        [ -z "$w" ] || fail "groff -man -ww $m: $w"
    fi
done

# The installed programs, elsewhere, by the names of the shipped inputs.
unset LIBRA_INPUTS
real_data=$(cd "$datadir" && pwd -P)
cd "$out/cwd" || fail "cannot cd to $out/cwd"
"$bindir/libra" --check-config emu-quick.cfg > check.txt 2>&1 ||
    { cat check.txt; fail "installed libra --check-config emu-quick.cfg failed"; }
grep -q "^# read from \"$real_data/emu-quick.cfg\"" check.txt ||
    { head -n 3 check.txt; fail "the config was not read from $real_data"; }
grep -q "hardware = \"$real_data/hardware/a800.cfg\"" check.txt ||
    { grep 'hardware =' check.txt; fail "device.hardware was not resolved under $real_data"; }
"$bindir/libra" --describe-workload workloads/r2e-gym.cfg --n 200 > describe.txt 2>&1 ||
    { cat describe.txt; fail "installed libra --describe-workload workloads/r2e-gym.cfg failed"; }
"$bindir/libra-sim" emu-quick.cfg --out sim.h5 > sim.txt 2>&1 ||
    { tail -n 20 sim.txt; fail "installed libra-sim emu-quick.cfg failed"; }
[ -s sim.h5 ] || fail "libra-sim wrote no metrics file"
cd "$top_builddir" || exit 1

make -s --no-print-directory -C "$top_builddir" uninstall DESTDIR="$stage" \
    > "$out/uninstall.log" 2>&1 || { tail -n 20 "$out/uninstall.log"; fail "make uninstall failed"; }
left=$(find "$stage" -type f | head -n 5)
[ -z "$left" ] || fail "make uninstall left files behind: $left"
echo "install: OK ($n inputs under $2, the programs find them from $out/cwd)"
[ -n "${KEEP:-}" ] || rm -rf "$out"
