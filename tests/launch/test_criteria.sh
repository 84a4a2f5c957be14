#!/usr/bin/env bash
# test_criteria.sh AMPTRAIN - dev/criteria.py, which checks the training loop's targets (bars) on one device
# call's rows: its seed row from a real (CPU, tiny) run's metrics file; every bar passing on rows that meet
# them (exit 0); a bar whose numbers miss it (exit 1, that bar named FAIL, the others still PASS); too few
# repeats, a line that is not JSON and a missing file (exit 2, saying which).
set -euo pipefail

source "$(dirname "$0")/lib.sh"
take_amptrain "$0" "$@"
criteria="$repo/dev/criteria.py"
out="$scratch/out"
rm -rf "$out"
mkdir -p "$out"

echo "== 1. the seed row from a run's metrics: seconds after the model build = total_s - startup_build_s"
"$amptrain" "$repo/configs/tiny.yaml" train.steps=4 log.every=2 log.metrics="$out/run.jsonl" checkpoint.dir= \
    >"$out/run.log" 2>&1 || fail "amptrain exited with $?; see $out/run.log"
"$PYTHON" "$criteria" --seed-row "$out/run.jsonl" 1 >"$out/seed_row.json" || fail "--seed-row exited with $?"
cat "$out/seed_row.json"
"$PYTHON" - "$out/run.jsonl" "$out/seed_row.json" <<'PY' || fail "the seed row does not match the run's summary"
import json, sys
summary = [r for r in map(json.loads, open(sys.argv[1])) if r.get("summary")][-1]
row = json.load(open(sys.argv[2]))
assert row["tag"] == "amptrain seed amp1", row
assert abs(row["after_build_s"] - (summary["total_s"] - summary["startup_build_s"])) < 2e-3, (row, summary)
assert 0 < row["after_build_s"] <= row["total_s"], row
assert abs(row["loop_s"] - summary["seconds"]) < 2e-3 and abs(row["peak_mib"] - summary["peak_mib"]) < 0.1, row
PY

# Rows shaped as dev/device_suite.sh criteria writes them; numbers that meet every bar.
rows() {  # compile70 torch70-repeats
    cat <<EOF
{"tag": "amptrain loop b256 amp1", "img_s_median": 6122.6, "peak_mem_MiB": 13986.5}
{"tag": "amptrain w1 b256 amp1", "img_s_total": 6134.7, "peak_mem_MiB": 14139}
{"tag": "torch w1 b256 amp1 cl1", "img_s_total": 4485.1, "peak_mem_MiB": 15905}
{"tag": "amptrain w1 b70 amp1", "img_s_total": 5050.8, "peak_mem_MiB": 4113}
{"tag": "torch w1 b70 amp1 cl1 compile reduce-overhead", "img_s_total": $1, "peak_mem_MiB": 4475}
{"tag": "amptrain loop b256 amp0", "img_s_median": 2814.4, "peak_mem_MiB": 27152.5}
{"tag": "torch w1 b256 amp0 cl1", "img_s_total": 2266.3, "peak_mem_MiB": 33115}
{"tag": "amptrain loop b256 amp0 cudnn.tf32=false", "img_s_median": 736.3, "peak_mem_MiB": 27344.5}
{"tag": "torch w1 b256 amp0 cl1 tf32off", "img_s_total": 687.2, "peak_mem_MiB": 33113}
{"tag": "amptrain seed amp1", "loop_s": 2.5, "after_build_s": 3.2, "total_s": 4.3, "peak_mib": 4281.1}
{"tag": "amptrain seed amp0", "loop_s": 4.5, "after_build_s": 4.7, "total_s": 5.8, "peak_mib": 8096.5}
{"tag": "seed-torch amp0", "total_s": 7.701, "peak_mib": 9714}
{"tag": "seed-torch amp1", "total_s": 5.46, "peak_mib": 6075}
EOF
    for ((r = 0; r < $2; r++)); do
        echo '{"tag": "amptrain loop b70 amp1", "img_s_median": 4936.5, "peak_mem_MiB": 4065.1}'
        echo '{"tag": "torch w1 b70 amp1 cl1", "img_s_total": 2551.1, "peak_mem_MiB": 4648}'
    done
}

# run NAME EXPECTED-EXIT ARGS...: criteria.py's output in $out/NAME.out
run() {
    local name=$1 want=$2 rc=0
    shift 2
    "$PYTHON" "$criteria" "$@" >"$out/$name.out" 2>&1 || rc=$?
    cat "$out/$name.out"
    ((rc == want)) || fail "$name: criteria.py exited with $rc, expected $want"
}

echo "== 2. every bar met: exit 0"
rows 4046.8 3 >"$out/pass.jsonl"
run pass 0 "$out/pass.jsonl"
(($(grep -c '^PASS ' "$out/pass.out") == 13)) || fail "not 13 PASS lines"
grep -q '^criteria: 13 of 13 bars pass$' "$out/pass.out" || fail "no 13-of-13 line"

echo "== 3. torch.compile faster than amptrain's slowest b70 repeat: exit 1, that bar FAIL, the rest PASS"
rows 5000 3 >"$out/fail.jsonl"
run fail 1 "$out/fail.jsonl"
grep -q '^FAIL .*torch.compile reduce-overhead: 4,936.500 against 5,000.000$' "$out/fail.out" || fail "no FAIL line"
(($(grep -c '^PASS ' "$out/fail.out") == 12)) || fail "not 12 PASS lines"

echo "== 4. two b70 repeats where the bars ask for three: exit 2, those bars MISSING"
rows 4046.8 2 >"$out/short.jsonl"
run short 2 "$out/short.jsonl"
grep -q '^MISSING .*fastest PyTorch eager repeat: 3 row(s) tagged "amptrain loop b70 amp1"' "$out/short.out" ||
    fail "no MISSING line naming the repeats"

echo "== 5. a line that is not JSON, a file that is not there: exit 2, named"
{ rows 4046.8 3; echo '{"tag": "torch w1 b70'; } >"$out/bad.jsonl"
run bad 2 "$out/bad.jsonl"
grep -q "bad.jsonl:20: not JSON" "$out/bad.out" || fail "the bad line is not named by file and line"
run absent 2 "$out/absent.jsonl"
grep -q "absent.jsonl: No such file" "$out/absent.out" || fail "the missing file is not named"
echo "test_criteria: passed"
