#!/bin/sh
# tools/gpu-bundle and tools/gpu-check without a GPU: the bundle of this build, then
# gpu-check's units step from it on the host stand-in of the CUDA module
# (LIBRA_TEST_NEED_GPU=0 LIBRA_CUDA_MODULE=host), in a mount namespace where this
# machine's Open MPI, PMIx and the libraries libra links are hidden -- as on a GPU node
# that has none of them -- so the tests, mpi_gpu_tp.sh's 4-rank mpirun among them, can
# only pass on what the bundle carries. Also: a bundle without its files and an
# unknown step are refused. Skipped (77) without the CUDA module (the bundle packs
# it), or where a mount namespace cannot be made (not root, no unshare).
. "$(dirname "$0")/mpi_common.sh"
cd "$top_srcdir" || exit 1
[ -f "$top_builddir/src/libra-cuda.so" ] || { echo "gpu_bundle: SKIP: no CUDA module"; exit 77; }
if [ "$(id -u)" != 0 ] || ! unshare -m true 2> /dev/null; then
    echo "gpu_bundle: SKIP: no mount namespace (root and unshare -m needed)"
    exit 77
fi
if [ "$(cd "$top_builddir" && pwd -P)" != "$(pwd -P)" ]; then
    echo "gpu_bundle: SKIP: a VPATH build (tools/gpu-bundle packs the tree's own)"
    exit 77
fi
dir=$(scratch gpu-bundle)

XZ_OPT="-1 -T0" tools/gpu-bundle "$dir/bundle" > "$dir/bundle.log" 2>&1 ||
    { cat "$dir/bundle.log"; fail "tools/gpu-bundle"; }
cat "$dir/bundle.log"
for f in build.tar.xz sysroot.tar.xz; do [ -s "$dir/bundle/$f" ] || fail "no $f in the bundle"; done
tar -tJf "$dir/bundle/sysroot.tar.xz" | grep -q "openmpi3/mca_btl_vader.so" ||
    fail "the bundle lacks Open MPI's plugins"
if tar -tJf "$dir/bundle/sysroot.tar.xz" | grep -E '/(libc|libstdc\+\+|libcudart|libnccl)\.so' > /dev/null; then
    fail "the bundle carries the C library, libstdc++ or CUDA's own"
fi

# refusals
out=$(tools/gpu-check --bundle "$dir" units 2>&1) && fail "a directory without a bundle was taken"
echo "$out" | grep -q "no tools/gpu-bundle output" || fail "gpu-check said: $out"
out=$(tools/gpu-check frobnicate 2>&1)
rc=$?
if [ "$rc" != 2 ] || ! echo "$out" | grep -q "unknown step frobnicate"; then
    fail "an unknown step: exit $rc, $out"
fi

# the system's Open MPI, PMIx and libra's libraries hidden: tmpfs over their
# directories, /dev/null over the files
lib=/usr/lib/$(gcc -print-multiarch 2> /dev/null || echo x86_64-linux-gnu)
hide=""
for so in $(ldd "$top_builddir/src/libra" "$top_builddir/tests/test_cuda" | awk '$3 ~ /^\// { print $3 }' |
            sort -u | grep -E 'lib(mpi|open-pal|open-rte|hdf5|config|openblas|cunit|pmix|hwloc|event)'); do
    hide="$hide $(readlink -f "$so")"
done
cat > "$dir/hidden.sh" << EOF
set -e
for d in $lib/openmpi $lib/pmix2 /usr/share/openmpi /etc/openmpi; do
    [ -d "\$d" ] && mount -t tmpfs none "\$d"
done
for f in /usr/bin/orterun /usr/bin/orted $hide; do mount --bind /dev/null "\$f"; done
set +e
! command -v ompi_info > /dev/null || ! ompi_info > /dev/null 2>&1 || { echo "Open MPI still visible"; exit 1; }
# one light test of each program (their suites ran already): what is checked here is
# that they load, and that mpirun starts 4 ranks, from the bundle
LIBRA_TEST_ONLY="packed,a full pool,a GRPO step,is refused" \
    LIBRA_TEST_NEED_GPU=0 LIBRA_CUDA_MODULE=host tools/gpu-check --bundle "$dir/bundle" \
    --out "$dir/check" --deadline 400 units
EOF
unshare -m sh "$dir/hidden.sh" || { cat "$dir/check/units.log" 2> /dev/null; fail "gpu-check units from the bundle"; }
grep -q "^units: passed" "$dir/check/summary.txt" || fail "no units: passed in the summary"
grep -q "ok: the GPU engine's tensor parallelism over MPI" "$dir/check/units.log" ||
    fail "mpi_gpu_tp.sh did not run from the bundle"
# each of the 4 programs ran a test, and none failed (CUnit's summaries)
[ "$(awk '$1 == "tests" && $3 >= 1 && $5 == 0' "$dir/check/units.log" | wc -l)" = 4 ] ||
    fail "not every program ran a test from the bundle"
echo "ok: tools/gpu-bundle, tools/gpu-check units from it with this machine's libraries hidden"
rm -rf "$dir"
