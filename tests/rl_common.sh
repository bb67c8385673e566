# Shared by the RL tests on the CPU device (the real model on the calc environment):
# the config they run and how a job is started. Sourced after mpi_common.sh.
#
# The model is the shipped SFT checkpoint (inputs/models/calc-base.h5): a policy
# that already answers some problems, so rewards, tool calls and GRPO updates are
# real. Budgets are small (4 prompts x 4 samples per step, 48 tokens a turn) so one
# job takes seconds on two cores.
CHECK_RL="$top_builddir/tests/check_rl"
RL_MODEL="models/calc-base.h5" # resolved against $LIBRA_INPUTS

# rl_write FILE OUTFILE STEPS STALENESS SYNC_INTERVAL RUN_KEYS PLAN_KEYS: the config of
# every RL test; RL_DEVICE (default cpu), RL_LOG_LEVEL (default warn), RL_TRAIN_EXTRA,
# RL_ROLLOUT_EXTRA and RL_MODEL_EXTRA (environment) add to it.
rl_write() {
    cat > "$1" <<CFG
run = { name = "rl-test"; steps = $3; seed = 7; log_level = "${RL_LOG_LEVEL:-warn}"; progress_interval_s = 5.0;
        $6 };
device = { type = "${RL_DEVICE:-cpu}"; };
model = { checkpoint = "$RL_MODEL"; ${RL_MODEL_EXTRA:-} };
rollout = { n_samples = 4; max_turns = 4; max_tokens_per_turn = 48; max_tokens = 512; ${RL_ROLLOUT_EXTRA:-} };
train = { batch_size = 16; max_staleness = $4; sync_interval = $5; lr = 5e-5; ${RL_TRAIN_EXTRA:-} };
plan = { $7 };
env = { name = "calc"; };
eval = { size = 16; interval = 0; };
output = { file = "$2"; };
CFG
}

# rl_config FILE OUTFILE STEPS N_TRAIN ROLLOUT_TP STALENESS SYNC_INTERVAL [RUN_KEYS]
#   ROLLOUT_TP: the plan's rollout_tp list, e.g. "1" or "1, 1";
#   RUN_KEYS: more keys of the run section, e.g. 'checkpoint_interval = 2;'.
#   RL_TRAIN_EXTRA, RL_PLAN_EXTRA (environment): more keys of the train and plan
#   sections, e.g. 'colocate = 1;' and 'train_tp = 2;'.
rl_config() {
    rl_write "$1" "$2" "$3" "$6" "$7" "${8:-}" "n_train = $4; rollout_tp = [$5]; ${RL_PLAN_EXTRA:-}"
}

# rl_sched_config FILE OUTFILE STEPS INTERVAL SCHEDULE [RUN_KEYS]: a scripted plan
# (plan.mode = "schedule", a new entry every INTERVAL steps, SCHEDULE its entries),
# on-policy, weights synced after every step.
rl_sched_config() {
    rl_write "$1" "$2" "$3" 0 1 "${6:-}" \
        "mode = \"schedule\"; interval = $4; schedule = ( $5 );"
}

# rl_job NP CONFIG LOGPREFIX [--resume]: runs the job to completion; on failure
# shows its output and fails the test. The time limit only turns a hung job (a
# deadlock) into a failure instead of a test that never ends; a healthy job takes
# seconds. A job still running after RL_HANG_S has every rank's stack dumped (gdb,
# when installed) before it is stopped, so the failure names the calls it hung in.
: "${RL_HANG_S:=180}"
rl_job() {
    rm -f "$3.hung" "$3.stacks"
    # the outer limit is a backstop for a dump that itself hangs
    timeout -k 10 $((RL_HANG_S + 120)) $MPIRUN -np "$1" "$LIBRA" "$2" ${4:-} \
        > "$3.stdout" 2> "$3.stderr" &
    job=$!
    ( sleep $RL_HANG_S; kill -0 $job 2> /dev/null || exit 0
      touch "$3.hung"
      if command -v gdb > /dev/null; then
          for p in $(pgrep -f "^$LIBRA $2"); do
              echo "---- stack of pid $p ($(tr '\0' '\n' < /proc/$p/environ 2> /dev/null | grep '^OMPI_COMM_WORLD_RANK=' || echo '?'))"
              timeout 60 gdb -q -batch -ex "thread 1" -ex "bt 16" -p "$p" 2>&1 | grep '^#' 
          done > "$3.stacks" 2>&1
      fi
      kill -TERM $job 2> /dev/null ) &
    watcher=$!
    wait $job
    rc=$?
    if [ -e "$3.hung" ]; then
        wait $watcher 2> /dev/null
    else # its sleep too: a sleep left behind holds make check's output pipe open
        pkill -P $watcher sleep 2> /dev/null
        kill $watcher 2> /dev/null
        wait $watcher 2> /dev/null
    fi
    [ $rc = 0 ] && [ ! -e "$3.hung" ] && return 0
    tail -n 30 "$3.stdout"; tail -n 30 "$3.stderr"
    if [ -e "$3.hung" ]; then
        cat "$3.stacks" 2> /dev/null
        fail "$1-rank RL job on $2 ${4:+($4) }hung: still running after $RL_HANG_S s" \
             "(stacks above, from $3.stacks)"
    fi
    fail "$1-rank RL job on $2 ${4:+($4) }failed (exit $rc)"
}

# kill_job PATTERN: SIGKILLs every process whose command line holds PATTERN (a test's
# own scratch path, e.g. its config), mpirun included, until none is left.
kill_job() {
    n=0
    while pgrep -f "$1" > /dev/null; do
        pkill -9 -f "$1"
        n=$((n + 1))
        [ $n -le 50 ] || fail "processes of the killed job survive SIGKILL"
        sleep 0.1
    done
}
