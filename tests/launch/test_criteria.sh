#!/usr/bin/env bash
# test_criteria.sh AMPTRAIN - dev/criteria.py, which checks the training loop's targets (bars) on one device
# call's rows: its seed row from a real (CPU, tiny) run's metrics file; every bar passing on rows that meet
# them (exit 0); a bar whose numbers miss it (exit 1, that bar named FAIL, the others still PASS); too few
# repeats, a line that is not JSON and a missing file (exit 2, saying which); the same for the fused bars
# (--bars fused), and dev/kernel_profile.py's row of a profiled step (--row) from an ncu CSV.
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
echo "== 6. the fused bars (--bars fused) on rows that meet them, one that misses, one without its profile row"
fused_rows() {  # b256-img/s batch-norm-share [profile row: 1|0]
    cat <<EOF
{"tag": "amptrain loop b256 amp1 cudnn.cache=off", "img_s_median": $1, "peak_mem_MiB": 11500.0, "startup_s": 7.6}
{"tag": "amptrain loop b256 amp1", "img_s_median": $1, "peak_mem_MiB": 11500.0, "startup_s": 7.7}
{"tag": "amptrain loop b256 amp1", "img_s_median": $1, "peak_mem_MiB": 11500.0, "startup_s": 0.8}
{"tag": "torch w1 b256 amp1 cl1", "img_s_total": 4485.1, "peak_mem_MiB": 15905}
{"tag": "amptrain loop b256 amp0", "img_s_median": 3010.0, "peak_mem_MiB": 27152.5}
{"tag": "torch w1 b256 amp0 cl1", "img_s_total": 2266.3, "peak_mem_MiB": 33115}
EOF
    for ((r = 0; r < 3; r++)); do
        echo '{"tag": "amptrain loop b70 amp1", "img_s_median": 5850.0, "peak_mem_MiB": 4065.1}'
        echo '{"tag": "torch w1 b70 amp1 cl1", "img_s_total": 2551.1, "peak_mem_MiB": 4648}'
    done
    if (($3)); then
        echo "{\"tag\": \"amptrain profile b256 amp\", \"kernels\": 508, \"kernel_ms\": 34.0, \"share\": {\"batch norm\": $2}}"
    fi
}
fused_rows 7600.0 0.24 1 >"$out/fused_pass.jsonl"
run fused_pass 0 --bars fused "$out/fused_pass.jsonl"
grep -q '^criteria: 7 of 7 bars pass$' "$out/fused_pass.out" || fail "no 7-of-7 line"
# the warm start-up is the last b256 row's (0.8 s), not the cache-filling run's (7.7 s)
grep -q '^PASS .*kernel-choice cache <= 1.5 s: 0.800 against 1.500$' "$out/fused_pass.out" || fail "warm start-up"
fused_rows 7400.0 0.379 1 >"$out/fused_fail.jsonl"
run fused_fail 1 --bars fused "$out/fused_fail.jsonl"
grep -q '^FAIL .*>= 7,500 img/s: 7,400.000 against 7,500.000$' "$out/fused_fail.out" || fail "no b256 FAIL line"
grep -q '^FAIL .*batch-norm kernels <= 25% of kernel time: 0.379 against 0.250$' "$out/fused_fail.out" ||
    fail "no batch-norm FAIL line"
grep -q '^criteria: 5 of 7 bars pass, 2 fail$' "$out/fused_fail.out" || fail "no 5-of-7 line"
fused_rows 7600.0 0.24 0 >"$out/fused_short.jsonl"
run fused_short 2 --bars fused "$out/fused_short.jsonl"
grep -q '^MISSING .*batch-norm kernels.*"amptrain profile b256 amp"' "$out/fused_short.out" || fail "no MISSING profile"
run fused_unknown 2 --bars nope "$out/fused_pass.jsonl"
grep -q "expected one of loop, fused" "$out/fused_unknown.out" || fail "an unknown bar set is not refused"

echo "== 7. kernel_profile.py --row: one step's kernels from ncu's CSV as a row for the fused bars"
cat >"$out/ncu.csv" <<'EOF'
==PROF== Connected to process
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","gpu__time_duration.sum"
"","","","","","","","nsecond"
"0","1","amptrain","h","bn_apply_kernel<__half, 8>","1","7","3000000"
"1","1","amptrain","h","nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NNT","1","7","5000000"
"2","1","amptrain","h","sm90_xmma_fprop_implicit_gemm_f16f16","1","7","1500000"
"3","1","amptrain","h","bn_backward_apply<__half>","1","7","500000"
EOF
"$PYTHON" "$repo/dev/kernel_profile.py" --row "amptrain profile b256 amp" "$out/ncu.csv" "$out/sums.csv" \
    >"$out/profile.out" || fail "kernel_profile.py exited with $?"
grep '^{' "$out/profile.out" >"$out/profile_row.jsonl" || fail "no row printed"
"$PYTHON" - "$out/profile_row.jsonl" "$out/sums.csv" <<'PY' || fail "the profile row or the sums are wrong"
import csv, json, sys
row = json.load(open(sys.argv[1]))
assert row["tag"] == "amptrain profile b256 amp" and row["kernels"] == 4 and row["kernel_ms"] == 10.0, row
assert row["share"] == {"batch norm": 0.35, "convolution (cuDNN)": 0.15, "gemm (1x1 convolutions, linear)": 0.5}, row
sums = {r["kernel"]: (int(r["calls"]), float(r["total_ms"])) for r in csv.DictReader(open(sys.argv[2]))}
assert sums["bn_apply_kernel<__half, 8>"] == (1, 3.0) and len(sums) == 4, sums
PY
"$PYTHON" "$repo/dev/kernel_profile.py" --row x "$out/absent.csv" "$out/o.csv" >"$out/absent_profile.out" 2>&1 &&
    fail "kernel_profile.py took a missing file"
grep -q "absent.csv: No such file" "$out/absent_profile.out" || fail "the missing ncu file is not named"
echo "test_criteria: passed"
