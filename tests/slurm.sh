#!/bin/sh
# The shipped job scripts under a real Slurm: `tools/test --slurm` runs this inside
# tools/slurm-local's throwaway one-node cluster (munged, slurmctld, slurmd). Skipped
# (77) otherwise: make check never submits jobs to a site's cluster. Each job is
# submitted with sbatch from a scratch directory (its runs/ gets the job's output and
# metrics files), waited for with a bound, and its final state and exit code are read
# from scontrol:
#   - jobs/emu-48gpu.sbatch, 49 ranks under srun --mpi=pmix with a plan that changes
#     every step: COMPLETED 0:0, check_run passes, the re-split latency printed (and
#     bounded: without yielding, oversubscribed ranks took seconds per re-split);
#   - jobs/cpu-calc.sbatch, real RL on 4 ranks: COMPLETED 0:0, check_run passes;
#   - a plain scancel of the 49-rank job: CANCELLED, and a metrics file that is
#     readable and does not say "complete";
#   - `scancel --signal=USR1 --batch` of the CPU job: the script hands SIGUSR1 to the
#     ranks, exit code 3, "cancelled", a checkpoint;
#   - the CPU job at its time limit (--time=2 --signal=B:USR1@90, the script's own
#     mechanism with a shorter limit): exit code 3 before the limit, "cancelled", a
#     checkpoint; then `scontrol requeue`: the same job runs again
#     (SLURM_RESTART_COUNT=1), resumes from that checkpoint by itself and completes;
#   - srun --mpi=pmi2: refused at once with one message naming pmix, exit code 2;
#   - jobs/cuda-a800-8gpu.sbatch and jobs/cuda-a800-multinode.sbatch with their GPU
#     request overridden (no GPUs here) and a CPU config of 9 ranks: COMPLETED 0:0,
#     LIBRA_MODEL in the run's config, the multi-node hosts list; too few tasks per
#     node refused, exit code 2.
. "$(dirname "$0")/mpi_common.sh"
. "$(dirname "$0")/rl_common.sh"
if [ -z "${LIBRA_TEST_SLURM:-}" ] || [ -z "${SLURM_CONF:-}" ] || ! command -v sbatch > /dev/null; then
    echo "slurm: SKIPPED: run by tools/test --slurm (a throwaway Slurm started by tools/slurm-local)"
    exit 77
fi
out=$(scratch slurm)
ln -s "$top_builddir/src" "$out/src"
mkdir -p "$out/runs"
JOBS="$top_srcdir/jobs"
EMU_CFG="$top_srcdir/tests/configs/slurm/emu48-resplit.cfg"
CPU_CFG="$top_srcdir/tests/configs/slurm/cpu-calc-small.cfg"
: "${SLURM_WAIT_S:=300}"
t0=$(date +%s)

# submit ARGS...: sbatch from the scratch directory; prints the job id.
submit() {
    (cd "$out" && sbatch --parsable "$@") | cut -d';' -f1
}

# field JOB NAME: one field of `scontrol show job` (JobState, ExitCode, Restarts ...)
field() {
    scontrol -o show job "$1" 2> /dev/null | tr ' ' '\n' | sed -n "s/^$2=//p"
}

# wait_job JOB [RESTARTS]: until the job (in its RESTARTS-th run, default 0) has
# ended; a job still running after SLURM_WAIT_S is cancelled and fails the test.
wait_job() {
    n=0
    while :; do
        case "$(field "$1" JobState)" in
        COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE|PREEMPTED)
            [ "$(field "$1" Restarts)" = "${2:-0}" ] && return 0 ;;
        esac
        n=$((n + 1))
        if [ $n -gt $((SLURM_WAIT_S * 2)) ]; then
            scancel "$1"
            show_job "$1"
            fail "job $1 still $(field "$1" JobState) after $SLURM_WAIT_S s"
        fi
        sleep 0.5
    done
}

# wait_running JOB FILE-GLOB: until the job runs and a file matching FILE-GLOB exists.
wait_running() {
    n=0
    while [ "$(field "$1" JobState)" != RUNNING ] || ! ls $2 > /dev/null 2>&1; do
        n=$((n + 1))
        [ $n -le $((SLURM_WAIT_S * 2)) ] || { show_job "$1"; fail "job $1 did not start (or write $2) in $SLURM_WAIT_S s"; }
        sleep 0.5
    done
}

show_job() {
    scontrol show job "$1" 2> /dev/null | grep -E 'JobState|ExitCode|Reason|RunTime'
    tail -n 30 "$out"/runs/*-"$1".out 2> /dev/null
}

# expect JOB STATE EXITCODE: the job's final state and exit code (e.g. COMPLETED 0:0).
expect() {
    s=$(field "$1" JobState) e=$(field "$1" ExitCode)
    [ "$s $e" = "$2 $3" ] || { show_job "$1"; fail "job $1 ended $s $e ($2 $3 expected)"; }
    echo "ok: job $1 ($(field "$1" JobName)) $s $e after $(field "$1" RunTime)"
}

# metrics JOB: the job's (first) metrics file, runs/<name>-<time>-job<JOB>.h5
metrics() {
    ls "$out"/runs/*-job"$1".h5 2> /dev/null | grep -v '\.\(resumed\|restart\)-' | head -n 1
}

# calc_config FILE STEPS: the CPU job's config with STEPS steps.
calc_config() {
    sed "s/steps = 4;/steps = $2;/" "$CPU_CFG" > "$1"
}

# The CPU job stopped at its time limit: submitted first, it runs beside the others
# (the node has 64 CPUs declared for the 2 real ones) while Slurm counts down.
calc_config "$out/limit.cfg" 100000
limit=$(submit --time=2 --signal=B:USR1@90 "$JOBS/cpu-calc.sbatch" "$out/limit.cfg")

# 1. the emulated 48-GPU job to completion
emu=$(submit "$JOBS/emu-48gpu.sbatch" "$EMU_CFG")
wait_job "$emu"
expect "$emu" COMPLETED 0:0
h5=$(metrics "$emu")
"$CHECK_RUN" "$h5" --min-steps 20 --min-plans 19 --expect-moves || fail "check_run of job $emu"
log="$out/runs/libra-emu48-$emu.out"
resplit=$(sed -n 's/.*re-splits (mean \([0-9.]*\) ms, max \([0-9.]*\) ms).*/\1 \2/p' "$log")
[ -n "$resplit" ] || { tail "$log"; fail "no re-split figures in $log"; }
set -- $resplit
echo "ok: 49 ranks under srun: re-splits mean $1 ms, max $2 ms"
grep -q "Open MPI yields the CPU while it waits" "$log" \
    || fail "libra did not set OMPI_MCA_mpi_yield_when_idle for 49 tasks on $(nproc) CPUs"
# a generous bound (the machine is shared): spinning ranks took seconds
awk -v m="$1" 'BEGIN { exit !(m < 1000) }' || fail "re-split mean $1 ms under srun (< 1000 expected)"

# 2. the CPU job to completion
cpu=$(submit "$JOBS/cpu-calc.sbatch" "$CPU_CFG")
wait_job "$cpu"
expect "$cpu" COMPLETED 0:0
"$CHECK_RUN" "$(metrics "$cpu")" --min-steps 4 --expect-status complete || fail "check_run of job $cpu"

# 3. a plain scancel of the 49-rank job once its metrics file exists: SIGTERM reaches
# the ranks and srun together, and srun then kills the step, so the file may be left
# "running" (readable: the writer flushes every row) or, when the ranks were quicker,
# "cancelled"; never "complete".
sed "s/steps = 20;/steps = 100000;/" "$EMU_CFG" > "$out/emu-long.cfg"
kill1=$(submit "$JOBS/emu-48gpu.sbatch" "$out/emu-long.cfg")
wait_running "$kill1" "$out/runs/*-job$kill1.h5"
sleep 3
scancel "$kill1"
wait_job "$kill1"
[ "$(field "$kill1" JobState)" = CANCELLED ] || { show_job "$kill1"; fail "scancel'd job $kill1 is $(field "$kill1" JobState)"; }
if "$CHECK_RUN" "$(metrics "$kill1")" --expect-status cancelled > "$out/kill1.check" 2>&1; then
    status=cancelled
else # readable, and what it says (check_run: FAIL: root attribute status ("cancelled" vs S))
    status=$(sed -n 's/.*root attribute status ("cancelled" vs \([a-z]*\)).*/\1/p' "$out/kill1.check")
fi
case "$status" in
running|cancelled) echo "ok: job $kill1 (scancel) CANCELLED, its metrics file reads \"$status\"" ;;
*) cat "$out/kill1.check"; fail "scancel'd job $kill1: metrics file status '$status' (running or cancelled expected)" ;;
esac

# 4. scancel --signal=USR1 --batch: a clean stop, as at the time limit
calc_config "$out/usr1.cfg" 100000
usr1=$(submit "$JOBS/cpu-calc.sbatch" "$out/usr1.cfg")
wait_running "$usr1" "$out/runs/*-job$usr1.h5"
sleep 5
scancel --signal=USR1 --batch "$usr1"
wait_job "$usr1"
expect "$usr1" FAILED 3:0
"$CHECK_RUN" "$(metrics "$usr1")" --expect-status cancelled --expect-event cancel \
    || fail "check_run of job $usr1 (scancel --signal=USR1 --batch)"
ls "$out/runs/cpu-calc-$usr1-ckpt"/step-*/COMPLETE > /dev/null 2>&1 \
    || fail "job $usr1 wrote no checkpoint when it stopped"

# 5. the time limit: SIGUSR1 90 s before it (Slurm checks every 30 s), a clean stop
wait_job "$limit"
expect "$limit" FAILED 3:0
"$CHECK_RUN" "$(metrics "$limit")" --expect-status cancelled --expect-event cancel --min-steps 1 \
    || fail "check_run of job $limit (time limit)"
grep -q "stop requested by signal" "$out/runs/libra-cpu-calc-$limit.out" \
    || fail "job $limit: no stop message in its output"
last=$(ls -d "$out/runs/cpu-calc-$limit-ckpt"/step-* 2> /dev/null | tail -n 1)
[ -e "$last/COMPLETE" ] || fail "job $limit wrote no checkpoint when it stopped"
step=$(basename "$last" | sed 's/^step-0*//')
echo "ok: job $limit stopped at its time limit after step $step, checkpoint $(basename "$last")"
# requeued (as after a node failure): two more steps from that checkpoint, every
# prompt trained once across the stop
cp "$last/state.h5" "$out/limit-state.h5" || fail "cannot copy $last/state.h5"
calc_config "$out/limit.cfg" $((step + 2))
# slurmd refuses to launch a job whose credential is not newer than the revocation
# of its previous run, and both are stamped in whole seconds ("Job N already killed,
# do not launch batch job", exit 1:0 at once): a requeue within the second the first
# run ended fails so, hence the pause
sleep 2
scontrol requeue "$limit" || fail "scontrol requeue $limit"
# a requeued job waits for its old credential to expire (2 minutes) unless told; and
# it is given a longer limit: run again under the first one's, slurmctld has sent it
# the --signal at once (2 s in), which it honours -- a clean stop with its resumed
# checkpoint, exit 3 (rl_cpu_signal.sh checks that case) -- not the completion this
# part of the test is for
scontrol update JobId="$limit" StartTime=now TimeLimit=10 \
    || fail "scontrol update $limit StartTime=now TimeLimit=10"
wait_job "$limit" 1
expect "$limit" COMPLETED 0:0
grep -q "Slurm requeued this job (restart 1): resuming from the newest" "$out/runs/libra-cpu-calc-$limit.out" \
    || { tail -n 20 "$out/runs/libra-cpu-calc-$limit.out"; fail "requeued job $limit did not resume by itself"; }
"$CHECK_RL" --resume-check "$out/limit-state.h5" "$out/runs/"*-job"$limit".resumed-"$step".h5 \
    || fail "check_rl of the requeued job $limit"
echo "ok: job $limit requeued, resumed from step $step and completed"

# 6. srun --mpi=pmi2 (LIBRA_SRUN_MPI): refused with one message that names pmix
pmi2=$(LIBRA_SRUN_MPI=pmi2 submit "$JOBS/cpu-calc.sbatch" "$CPU_CFG")
wait_job "$pmi2"
expect "$pmi2" FAILED 2:0
log="$out/runs/libra-cpu-calc-$pmi2.out"
[ "$(grep -c 'srun --mpi=pmix' "$log")" = 1 ] || { cat "$log"; fail "job $pmi2 (--mpi=pmi2): not one message naming pmix"; }
grep 'libra:' "$log"

# 7. the GPU job scripts' plumbing on CPU ranks (the cluster has no GPUs:
# --gpus-per-node=0 overrides their GPU line, LIBRA_GPUS_PER_NODE=8 stands for
# SLURM_GPUS_ON_NODE): 9 tasks on the node run to completion, LIBRA_MODEL is written
# into the run's copy of the config, checkpoints go to a directory of the job's own,
# and the multi-node script's hosts list (what srun --distribution=arbitrary lays the
# step out by) names the node 9 times; that script refuses --ntasks-per-node below
# the GPUs + 1 before it starts anything.
CUDA_CFG="$top_srcdir/tests/configs/slurm/cuda-layout.cfg"
cp "$top_srcdir/inputs/models/calc-base.h5" "$out/model.h5" || fail "cannot copy the model"
model=$(realpath "$out/model.h5")
for script in cuda-a800-8gpu cuda-a800-multinode; do
    tag=cuda-${script#cuda-a800-}
    gpu=$(OPENBLAS_NUM_THREADS=1 LIBRA_GPUS_PER_NODE=8 LIBRA_MODEL="$out/model.h5" \
          submit --gpus-per-node=0 --nodes=1 "$JOBS/$script.sbatch" "$CUDA_CFG")
    wait_job "$gpu"
    expect "$gpu" COMPLETED 0:0
    "$CHECK_RUN" "$(metrics "$gpu")" --min-steps 3 --expect-status complete || fail "check_run of job $gpu"
    grep -qF "checkpoint = \"$model\";" "$out/runs/$tag-$gpu.cfg" \
        || { grep -n checkpoint "$out/runs/$tag-$gpu.cfg"; fail "job $gpu: LIBRA_MODEL is not the run's model.checkpoint"; }
    grep -q "checkpoint_dir = \"runs/$tag-$gpu-ckpt\"" "$out/runs/$tag-$gpu.cfg" \
        || fail "job $gpu: no checkpoint directory of its own in $out/runs/$tag-$gpu.cfg"
done
hosts="$out/runs/cuda-multinode-$gpu.hosts"
[ "$(wc -l < "$hosts")" = 9 ] && [ "$(sort -u "$hosts" | wc -l)" = 1 ] \
    || { cat "$hosts"; fail "job $gpu: $hosts does not name one node 9 times"; }
echo "ok: the GPU job scripts: 9 tasks, LIBRA_MODEL in the run's config, a hosts list of 9"
few=$(LIBRA_GPUS_PER_NODE=8 submit --gpus-per-node=0 --nodes=1 --ntasks-per-node=4 \
      "$JOBS/cuda-a800-multinode.sbatch" "$CUDA_CFG")
wait_job "$few"
expect "$few" FAILED 2:0
grep -q -- "--ntasks-per-node=9" "$out/runs/libra-cuda-multinode-$few.out" \
    || { cat "$out/runs/libra-cuda-multinode-$few.out"; fail "job $few: no message asking for --ntasks-per-node=9"; }

echo "slurm: all jobs as expected in $(( $(date +%s) - t0 )) s"
[ -n "${KEEP:-}" ] || rm -rf "$out"
