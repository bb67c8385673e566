#!/bin/sh
# Tensor parallelism and shard-matched weight syncs over MPI: the CUnit programs
# tests/test_tp_mpi (4 ranks) and tests/test_sync_mpi (10 ranks), every rank running
# the collective suites; rank 0 prints the CUnit summary.
. "$(dirname "$0")/mpi_common.sh"
export OPENBLAS_NUM_THREADS=1
# a deadlock (e.g. a TP instance's quiesce waiting forever) fails instead of hanging
timeout -k 10 300 $MPIRUN -np 4 "$top_builddir/tests/test_tp_mpi" || fail "test_tp_mpi (exit $?; 124: hung)"
timeout -k 10 300 $MPIRUN -np 10 "$top_builddir/tests/test_sync_mpi" || fail "test_sync_mpi (exit $?; 124: hung)"

# libra --bench-sync runs to its end (its instances' ranks swap the weights in together)
# and relays: with TP [2,2,1,1,1,1] from one training rank, the busiest sender sends a
# sixth of what point-to-point sends make it send: the model once, to the TP-1 chain
# (whose last member feeds the two TP-2 places), instead of 8 ranks' shards (6 models;
# a little more than a sixth: the norms, replicated, go to both TP-2 places)
d=$(scratch bench-sync)
cat > "$d/sync.cfg" <<CFG
run = { name = "bench-sync-test"; seed = 1; };
device = { type = "cpu"; };
model = { hidden_size = 64; n_layers = 2; n_heads = 4; n_kv_heads = 2; head_dim = 16;
          intermediate_size = 128; max_position = 256; };
rollout = { slots = 2; max_tokens = 128; max_tokens_per_turn = 32; };
plan = { n_train = 1; rollout_tp = [2, 2, 1, 1, 1, 1]; };
env = { name = "calc"; };
CFG
# the same on device cuda with GPU-to-GPU runs (host-staged, on the CUDA module's host
# stand-in), whose feeds the TP-1 chain's last rank packs on its GPU
sed 's/type = "cpu"/type = "cuda"/' "$d/sync.cfg" > "$d/cuda.cfg"
for dev in sync cuda; do
    LIBRA_CUDA_MODULE=host LIBRA_TEST_SYNC_GPU=host \
        timeout -k 10 300 $MPIRUN -np 10 "$LIBRA" --bench-sync "$d/$dev.cfg" > "$d/out" 2>&1 ||
        { cat "$d/out"; fail "libra --bench-sync $dev.cfg (exit $?; 124: hung)"; }
    x=$(sed -n "s/^  relayed \/ point to point: \([0-9.]*\) of the busiest sender's bytes.*/\1/p" "$d/out")
    [ -n "$x" ] || { cat "$d/out"; fail "bench-sync $dev.cfg: no relayed / point-to-point line"; }
    awk -v x="$x" 'BEGIN { exit !(x >= 0.16 && x <= 0.18) }' ||
        { cat "$d/out"; fail "bench-sync $dev.cfg: the relayed busiest sender sent $x of point to point's bytes"; }
    grep -q "^  link: rank [0-9]* -> rank [0-9]* over MPI, .* GB/s" "$d/out" ||
        { cat "$d/out"; fail "bench-sync $dev.cfg: no link line"; }
    echo "ok: bench-sync relays on $dev.cfg (the busiest sender: $x of its point-to-point bytes)"
done
echo "ok: tensor parallelism and weight syncs over MPI"
