#!/bin/sh
# The command-line conventions (include/libra/cli.h) of every program and command. The
# commands are read from `libra --help`, so a new one is checked without being named
# here. For each: --help exits 0 with its usage line on stdout; --version exits 0;
# an unknown option exits 2 with a usage line on stderr; a missing argument (an
# operand, else an option's value) or a stray one exits 2 with a message. Nothing
# here runs a command's work. Also the old `libra --NAME` spellings, strict numbers,
# and `libra` alone.
. "$(dirname "$0")/mpi_common.sh"
out=$(scratch cli-conv)
SIM="$top_builddir/src/libra-sim"

# usage_error WHAT GREP CMD...: CMD exits 2, prints nothing on stdout, and its stderr
# holds GREP and a usage line.
usage_error() {
    what=$1 want=$2
    shift 2
    rc=0
    "$@" > "$out/stdout" 2> "$out/stderr" || rc=$?
    [ $rc = 2 ] || { cat "$out/stderr"; fail "$what: exit $rc, not 2"; }
    [ -s "$out/stdout" ] && fail "$what: a usage error wrote to stdout"
    grep -q -- "$want" "$out/stderr" || { cat "$out/stderr"; fail "$what: no '$want'"; }
    grep -q "^usage: " "$out/stderr" || { cat "$out/stderr"; fail "$what: no usage line"; }
}

# check NAME CMD...: the conventions of the command line CMD (NAME: in its usage line).
check() {
    name=$1
    shift
    "$@" --help > "$out/help" 2> "$out/stderr" || fail "$name --help: exit $?"
    [ -s "$out/stderr" ] && fail "$name --help wrote to stderr"
    grep -q "^usage: .*$name" "$out/help" || fail "$name --help: no usage line"
    "$@" --version > "$out/version" || fail "$name --version: exit $?"
    grep -q "^libra\(-sim\)\? [0-9]" "$out/version" || fail "$name --version: '$(cat "$out/version")'"
    usage_error "$name --no-such-option" "unknown option '--no-such-option'" "$@" --no-such-option
    # the first word after the command in its usage line: an operand it needs?
    first=$(sed -n 's/^usage: //p' "$out/help" | head -n 1 | sed "s/.*$name\]* *//" | cut -d' ' -f1)
    # an option that takes a value (the help lists it as "  --opt VALUE")
    opt=$(sed -n 's/^  \(--[a-z-]*\) [A-Z].*/\1/p' "$out/help" | head -n 1)
    case "$first" in
    [A-Z]*) usage_error "$name without $first" "missing" "$@" ;;
    esac
    if [ -n "$opt" ]; then
        usage_error "$name $opt without a value" "option '$opt' needs a value" "$@" "$opt"
    fi
    case "$first$opt" in
    [A-Z]* | *--*) ;;
    *) usage_error "$name with a stray argument" "no-such-arg" "$@" no-such-arg ;;
    esac
    n=$((n + 1))
}

cmds=$("$LIBRA" --help | awk '/^commands:/ { on = 1; next } /^$/ { on = 0 } on && /^  [a-z]/ { print $1 }')
[ "$(echo "$cmds" | wc -w)" -ge 20 ] || fail "libra --help lists too few commands: $cmds"
n=0
for c in $cmds; do
    check "$c" "$LIBRA" "$c"
done
check libra-sim "$SIM"
check "libra-sim --report" "$SIM" --report
echo "ok: $n command lines follow the conventions"

# the older spellings still work
for c in check-config describe-workload trace-export config-reference devices bench-engine \
    bench-tp bench-gpu bench-sync bench-sched bench-planner-solve bench-planner-report \
    bench-tokenizer write-random-hf bench-load; do
    "$LIBRA" "--$c" --help | grep -q "^usage: .*$c" || fail "libra --$c --help"
done
"$LIBRA" --config-reference | grep -q "plan.mode" || fail "libra --config-reference"

# the program itself
"$LIBRA" --version | grep -q "^libra [0-9]" || fail "libra --version"
rc=0; "$LIBRA" > /dev/null 2> "$out/stderr" || rc=$?
[ $rc = 2 ] && grep -q "^commands:" "$out/stderr" || fail "libra alone: exit $rc, or no command list"
usage_error "libra --no-such-option" "unknown command or option" "$LIBRA" --no-such-option
usage_error "libra -x" "unknown command or option" "$LIBRA" -x

# numbers are read whole, in range and finite
model="$top_srcdir/tests/golden/qwen3-gqa-tied.model.h5"
usage_error "--max-new 1x" "--max-new '1x'" "$LIBRA" generate "$model" --max-new 1x
usage_error "--max-new 0" "integer in \[1," "$LIBRA" generate "$model" --max-new 0
usage_error "--temperature nan" "--temperature 'nan'" "$LIBRA" generate "$model" --temperature nan
usage_error "--top-p inf" "--top-p 'inf'" "$LIBRA" generate "$model" --top-p inf
usage_error "--seed -1" "--seed '-1'" "$LIBRA" generate "$model" --seed -1
usage_error "--np huge" "--np '99999999999999999999'" "$SIM" x.cfg --np 99999999999999999999
usage_error "-np 1" "--np '1'" "$SIM" x.cfg -np 1
usage_error "--gpus 4,,8" "--gpus '4,,8'" "$LIBRA" bench-planner-solve x.cfg --gpus 4,,8
usage_error "--dtype f8" "expected bf16, f16 or f32" "$LIBRA" export "$model" "$out/x" --dtype f8
usage_error "ambiguous --t" "ambiguous option '--t'" "$LIBRA" generate "$model" --t 1
usage_error "--chat=1" "takes no value" "$LIBRA" generate "$model" --chat=1
echo "ok: strict numbers and values"

# srun --mpi=pmi2 (what its plugin puts in the environment): task 0 says to use pmix,
# the other tasks say nothing, all exit 2 before MPI_Init (tests/slurm.sh: under Slurm).
# Open MPI only: an MPI with a PMI-2 client is not refused.
if mpirun --version 2>&1 | grep -q "Open MPI"; then
cfg="$top_srcdir/inputs/emu-quick.cfg"
pmi2() { env SLURM_STEP_ID=0 SLURM_STEP_NUM_TASKS=4 SLURM_MPI_TYPE=pmi2 PMI_FD=9 PMI_RANK="$1" \
             SLURM_PROCID="$1" "$LIBRA" "$cfg" > "$out/stdout" 2> "$out/stderr"; }
rc=0; pmi2 0 || rc=$?
[ $rc = 2 ] && grep -q "with --mpi=pmi2, but Open MPI joins a Slurm step only through PMIx" "$out/stderr" \
    && grep -q 'srun --mpi=pmix' "$out/stderr" || { cat "$out/stderr"; fail "srun --mpi=pmi2 task 0: exit $rc, or no message naming pmix"; }
rc=0; pmi2 1 || rc=$?
[ $rc = 2 ] && [ ! -s "$out/stderr" ] || { cat "$out/stderr"; fail "srun --mpi=pmi2 task 1: exit $rc, or a message"; }
echo "ok: srun --mpi=pmi2 refused, naming pmix"
fi
[ -n "${KEEP:-}" ] || rm -rf "$out"
