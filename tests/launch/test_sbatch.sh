#!/usr/bin/env bash
# test_sbatch.sh - launch/amptrain.sbatch without Slurm: bash -n, the directives and settings the requeue
# pattern relies on, and the script run by bash as the batch shell would be, with stand-ins for srun,
# mpirun and scontrol first on PATH (each records its arguments and the signals it gets):
#   1. SIGUSR1 to the batch shell (what --signal=B:USR1@120 sends) reaches the job step, whose clean exit
#      (0) makes the script requeue the job: scontrol requeue JOBID, exit 0
#   2. a step that ends by itself (0): no requeue; one that fails (1): exit 1, no requeue
#   3. srun is given --mpi=pmix, SRUN_CPUS_PER_TASK from SLURM_CPUS_PER_TASK, and amptrain CONFIG
#      checkpoint.resume=auto followed by the user's arguments; LAUNCHER=mpirun gives mpirun -np NTASKS
#   4. no CONFIG, or an option first: usage, exit 2
# Run in a scratch folder (the working directory).
set -euo pipefail

source "$(dirname "$0")/lib.sh"
sbatch="$repo/launch/amptrain.sbatch"
out="$scratch/out"
rm -rf "$out"
mkdir -p "$out/bin"

echo "== 0. bash -n and the directives"
bash -n "$sbatch" || fail "bash -n"
for directive in '--signal=B:USR1@120' '--requeue' '--open-mode=append' '--ntasks-per-node=' '--gpus-per-node=' \
    '--cpus-per-task='; do
    grep -q "^#SBATCH $directive" "$sbatch" || fail "no '#SBATCH $directive' line"
done
grep -q 'export SRUN_CPUS_PER_TASK=\$SLURM_CPUS_PER_TASK' "$sbatch" || fail "SRUN_CPUS_PER_TASK is not set"
grep -q '^trap forward_stop USR1' "$sbatch" || fail "the batch shell does not trap USR1"
grep -q 'scontrol requeue "\$SLURM_JOB_ID"' "$sbatch" || fail "no scontrol requeue"

# The stand-ins: MODE (in the environment) says how the step ends: "signal" waits for SIGUSR1 and exits
# 0 on it, "done" exits 0 at once, "fail" exits 1.
for tool in srun mpirun; do
    cat >"$out/bin/$tool" <<EOF
#!/usr/bin/env bash
printf '%s\n' "\$@" >"$out/$tool.args"
echo "SRUN_CPUS_PER_TASK=\${SRUN_CPUS_PER_TASK-unset}" >"$out/$tool.env"
case \$MODE in
done) exit 0 ;;
fail) exit 1 ;;
esac
trap 'echo USR1 >"$out/$tool.signals"; exit 0' USR1
touch "$out/$tool.started"
for ((i = 0; i < 600; i++)); do sleep 0.1; done
exit 9
EOF
done
cat >"$out/bin/scontrol" <<EOF
#!/usr/bin/env bash
printf '%s ' "\$@" >"$out/scontrol.args"
EOF
chmod +x "$out"/bin/*

# batch MODE [VAR=VALUE ...] -- ARGS...: the script under a Slurm-like environment, in the background ($job).
batch() {
    local mode=$1
    shift
    local -a vars=()
    while [[ $1 != -- ]]; do vars+=("$1") && shift; done
    shift
    rm -f "$out"/*.args "$out"/*.env "$out"/*.signals "$out"/*.started
    env PATH="$out/bin:$PATH" MODE="$mode" SLURM_JOB_ID=4242 SLURM_NTASKS=16 SLURM_NTASKS_PER_NODE='8(x2)' \
        SLURM_CPUS_PER_TASK=12 SLURM_SUBMIT_DIR="$scratch" AMPTRAIN=/opt/amptrain/bin/amptrain "${vars[@]}" \
        bash "$sbatch" "$@" >"$out/batch.log" 2>&1 &
    job=$!
}

finish() { # finish: waits for the script; its exit code in $rc
    status wait "$job"
    cat "$out/batch.log"
}

echo "== 1. SIGUSR1 before the time limit: passed to the step, then requeued"
batch signal -- configs/tiny.yaml train.epochs=3
for ((i = 0; i < 300; i++)); do [[ -e $out/srun.started ]] && break; sleep 0.1; done
[[ -e $out/srun.started ]] || fail "srun did not start: $(cat "$out/batch.log")"
kill -USR1 "$job"
finish
((rc == 0)) || fail "exit $rc after a clean stop, expected 0"
[[ $(cat "$out/srun.signals" 2>/dev/null) == USR1 ]] || fail "srun did not get SIGUSR1"
[[ $(cat "$out/scontrol.args" 2>/dev/null) == "requeue 4242 " ]] || fail "no 'scontrol requeue 4242'"

echo "== 2. a step that ends by itself, or fails: no requeue"
batch done -- configs/tiny.yaml
finish
((rc == 0)) || fail "exit $rc for a finished run"
[[ ! -e $out/scontrol.args ]] || fail "a finished run was requeued"
batch fail -- configs/tiny.yaml
finish
((rc == 1)) || fail "exit $rc for a failed step, expected 1"
[[ ! -e $out/scontrol.args ]] || fail "a failed run was requeued"

echo "== 3. what srun and mpirun are given"
batch done -- configs/tiny.yaml train.epochs=3 --dry-run
finish
mapfile -t args <"$out/srun.args"
want=(--mpi=pmix --gpu-bind=none --cpu-bind=none --kill-on-bad-exit=1 /opt/amptrain/bin/amptrain configs/tiny.yaml
    checkpoint.resume=auto train.epochs=3 --dry-run)
[[ ${args[*]} == "${want[*]}" ]] || fail "srun got: ${args[*]}; want: ${want[*]}"
[[ $(cat "$out/srun.env") == SRUN_CPUS_PER_TASK=12 ]] || fail "srun saw $(cat "$out/srun.env"), want 12"
batch done LAUNCHER=mpirun -- configs/tiny.yaml
finish
mapfile -t args <"$out/mpirun.args"
[[ " ${args[*]} " == *" -np 16 --map-by ppr:8:node "* ]] || fail "mpirun got: ${args[*]}"
[[ " ${args[*]} " == *" /opt/amptrain/bin/amptrain configs/tiny.yaml checkpoint.resume=auto "* ]] \
    || fail "mpirun got: ${args[*]}"

echo "== 4. usage errors"
for bad in "" "--bench"; do
    status env PATH="$out/bin:$PATH" bash "$sbatch" $bad >"$out/usage.log" 2>&1
    ((rc == 2)) && grep -q '^usage: ' "$out/usage.log" || fail "'$bad' gave exit $rc: $(cat "$out/usage.log")"
done
[[ ! -e $out/srun.args ]] || fail "srun ran on a usage error"

echo "PASS"
