#!/usr/bin/env bash
# test_signals.sh AMPTRAIN - stopping the launch scripts as a terminal, a batch system or a timeout does, on
# the CPU backend:
#   1. launch/amptrain-mpirun --cpu --np 2 configs/tiny.yaml, its whole process group sent SIGTERM once
#      training runs (Ctrl-C, kill -TERM -PGID): every rank finishes its step, the checkpoint is written,
#      and the script exits 0 (mpirun alone would exit 1)
#   2. launch/scaling --cpu --ranks 2 (a long point), itself sent SIGTERM: it exits 128 + 15 and leaves no
#      process behind (amptrain-mpirun, mpirun, the ranks)
# Run in a scratch folder (the working directory).
set -euo pipefail

source "$(dirname "$0")/lib.sh"
take_amptrain "$0" "$@"
out="$scratch/out"
rm -rf "$out"
mkdir -p "$out"

# wait_for FILE PATTERN SECONDS: until FILE holds a line matching PATTERN.
wait_for() {
    local i
    for ((i = 0; i < $3 * 10; i++)); do
        grep -q -- "$2" "$1" 2>/dev/null && return 0
        sleep 0.1
    done
    fail "no '$2' in $1 after $3 s: $(cat "$1")"
}

# The processes of a run still alive: those whose command line matches $1 (each run below has its own mark).
left_over() {
    pgrep -f -- "$1" || true
}

echo "== 1. amptrain-mpirun, SIGTERM to its process group"
run="$out/mpirun"
# setsid: a process group (and session) of its own, led by the script, as a terminal's job would be
setsid "$repo/launch/amptrain-mpirun" --cpu --np 2 --amptrain "$amptrain" "$repo/configs/tiny.yaml" log.every=1 \
    log.progress=never "checkpoint.dir=$run" "log.metrics=$run/metrics.jsonl" >"$out/mpirun.log" 2>&1 &
leader=$!
wait_for "$out/mpirun.log" '^step 2/' 120
kill -TERM -- "-$leader"
status wait "$leader"
cat "$out/mpirun.log"
((rc == 0)) || fail "amptrain-mpirun exited $rc after SIGTERM to its group, expected 0"
grep -q '^stopped by signal after step ' "$out/mpirun.log" || fail "the run did not stop on the signal"
[[ -s $run/last.safetensors ]] || fail "no checkpoint after the stop"
[[ -z $(left_over "checkpoint.dir=$run") ]] || fail "processes left: $(left_over "checkpoint.dir=$run")"

echo "== 2. launch/scaling, SIGTERM while a point runs"
"$PYTHON" "$repo/launch/scaling" --cpu --config "$repo/configs/tiny.yaml" --ranks 2 --precisions amp --steps 100000 \
    --warmup 1 --amptrain "$amptrain" --out "$out/scaling" >"$out/scaling.log" 2>&1 &
driver=$!
# the ranks are up once both have read the config (the point's log is written at its end: wait for them)
for ((i = 0; i < 600; i++)); do
    (($(pgrep -fc -- "$amptrain .*--bench-steps 100000 .*--bench-tag weak-amp-n2" || true) >= 2)) && break
    sleep 0.1
done
sleep 2
kill -TERM "$driver"
status wait "$driver"
cat "$out/scaling.log"
((rc == 143)) || fail "launch/scaling exited $rc after SIGTERM, expected 143"
mark="--bench-steps 100000 --bench-warmup 1 --bench-tag weak-amp-n2"
for ((i = 0; i < 50; i++)); do
    [[ -z $(left_over "$mark") ]] && break
    sleep 0.1
done
[[ -z $(left_over "$mark") ]] || fail "launch/scaling left processes behind: $(ps -o pid,pgid,cmd -p "$(left_over "$mark" | paste -sd,)")"
grep -q '^\$ .*amptrain-mpirun' "$out"/scaling/logs/amptrain-weak-amp-n2.log || fail "the stopped point's log is missing"

echo "PASS"
