#!/usr/bin/env bash
# device_suite.sh STAGES... - build on the GPU machine and run the named stages; logs go to $OUT.
#   build     cmake + build for sm_90 (needs the build dependencies under .devdeps/)
#   gputests  the gpu ctest label with AMPTRAIN_REQUIRE_GPU=1 (a missing GPU fails instead of skipping)
#   gpuall    the same tests in less time: test_gpu_ops' cases (tests/gpu/test_gpu_ops.c's table) as $GPUALL_JOBS
#             (default 6) processes at once, the longest cases (batchnorm*) first, beside ctest running the gpu
#             label's other suites; a log per case ($OUT/gpuall_CASE.log) and a line each. The cases spend most
#             of their time in the CPU reference on the host, so they overlap well on one GPU
#   parity    torchvision export -> test_torch_parity -> torchvision loads amptrain's checkpoint
#   diag      per-step loss/scale/skips of a short ResNeXt-50 AMP run, 1 and 2 ranks
#   dp2       test_data_parallel on the CUDA backend under mpirun -np 2 (NCCL), including its model cut
#             into dozens of buckets; test_kernel_choices (rank 0's timed choices taken by rank 1); then
#             test_nccl_faults (a SIGSTOPped rank ends the job in time)
#   bench1    amptrain --bench vs torch_baseline.py on one GPU, batch 256, AMP and fp32
#   bench2    the same on two GPUs, batch 256 each (mpirun / torchrun)
#   bench70   bench1 at batch 70
#   bench70x2 bench2 at batch 70 per GPU
#   benchws   AMP batch 256 with cudnn.workspace_mb 1024, 512, 256 and 128, torch beside
#   loop      the training loop a user runs (data made on the host by the loader, uploaded every step),
#             batch 256 and 70, AMP, each beside --bench and torch_baseline.py, in 3 alternating repeats;
#             then torch.compile reduce-overhead at batch 70
#   ab        the loop before and after a change (AMPTRAIN_BEFORE=the earlier binary), b256 and b70 AMP, twice
#             each, alternating with PyTorch
#   before    builds the earlier side of an A/B on this machine: a copy of this tree in /tmp/before with the files
#             under $BEFORE_FILES (default .devbefore/tree, a folder mirroring the repository's paths, carried to
#             the machine) put in place, then amptrain and bench_batchnorm; later stages of the same call see
#             AMPTRAIN_BEFORE=/tmp/before/build/amptrain
#   bnab      build/bench_batchnorm 256 of this tree and of the before stage's, alternating $BNAB_REPS times
#             (default 1), each cut at $BNAB_TIMEOUT s (default 240; a whole run takes over 150 s, mostly filling
#             buffers on the host): $OUT/bnab_{after,before}_N.txt
#   bf16      the b256 AMP loop in fp16 and in bf16, alternating $BF16_REPS times (default 2), PyTorch beside
#   bnconv    test_gpu_ops' conv_bn, bn_conv_bn and bn_conv_backward_data cases (batch norm inside the 1x1
#             convolutions, forward and backward)
#   bwdstreams bench_bwd_streams at batch 70 and 256: the convolutions' weight gradients beside their data
#             gradients on a second stream against the two in turn (a prototype's measurement)
#   groupedconv bench_grouped_conv at batch 256 and 70: the grouped 3x3 convolutions on every engine cuDNN's backend
#             API offers against the trainer's route (cuDNN's legacy API)
#   convbn    the AMP loop at batch $CONVBN_BATCH (256) with batch norm fused into the 1x1 convolutions where timed
#             faster (auto) and never (unfused), alternating $CONVBN_REPS times, PyTorch beside; the start-up
#             choices logged
#   startup   start-up at b256 AMP: cold with cudnn.batch_norm auto and unfused, then warm (the kernel-choice cache)
#   recompute the b256 AMP loop at model.recompute_bn_blocks $RECOMPUTE_BLOCKS (2 8 16), PyTorch beside
#   loopshort loop's rows in one short call: b256 twice, b70 twice (torch eager beside), no torch.compile
#   loop1     one repeat of loop's batch-256 AMP row (loop, --bench with its convolution picks logged, torch)
#   loopfp32  the same in fp32 at batch 256, at the defaults (TF32 in convolutions, as PyTorch) and with
#             TF32 off on both sides
#   criteria  the training loop's performance targets in one call: b256 AMP loop, --bench and PyTorch;
#             b70 --bench, then loop and PyTorch alternating 3 times, torch.compile reduce-overhead; fp32 b256
#             loop and PyTorch at the defaults and with TF32 off; the seed stage; then dev/criteria.py checks
#             the targets on them
#   criteriafused  batch norm inside the convolutions: the b256 AMP loop cold and on the kernel-choice cache, b70
#             loop 3 times, fp32 b256 loop, each beside PyTorch, and one b256 AMP step under ncu; then
#             dev/criteria.py --bars fused checks those targets
#   seed      configs/seed_resnext50.yaml end to end (AMP, fp32) beside the seed's own PyTorch script
#   fmnist    Fashion-MNIST (IDX files carried in .fmnist/) -> ImageFolder of JPEGs -> configs/fashion_mnist.yaml
#   fmnistruns  the runs listed in $FMNIST_RUNS side by side on the GPU (Fashion-MNIST as in fmnist)
#   emadiag   the Fashion-MNIST EMA run of dev/fmnist_ema_runs.txt (emaD) checkpointed every epoch and inspected
#             (dev/ema_inspect.py), beside PyTorch's twin with torchvision's EMA (dev/ema_torch_fmnist.py)
#   jpegs     2048 photo-like 500x375 quality-90 JPEGs: --bench-data (decode + augment alone) with data.decode
#             host and device, then 40 steps of the training loop at batch 256 AMP on that folder with each
#   bnbench   training batch norm, cuDNN's against amptrain's own and auto's pairs, on every ResNeXt-50 shape
#             (build/bench_batchnorm), then --bench b256 AMP with cudnn.batch_norm cudnn, own and auto
#   ends      bn_add_bn (a downsampling block's end in one op) against the CPU (test_gpu_ops' bn_add_bn case only),
#             then bench_batchnorm's block ends: the two layers' calls on auto's pairs against the fused kernels
#   bntests   test_gpu_ops' batchnorm and bn_add_bn cases alone
#   stem      the stem's convolution padded to 4 or 8 channels and on amptrain's own kernels (test_gpu_ops' conv,
#             conv_padded and conv_own cases), and the route each direction took in fp16 and bf16 at batch 256
#             (AMPTRAIN_CONV_LOG)
#   opcases   test_gpu_ops' cases in $OP_CASES (default: cast, conv, pooling, non-finite check, optimizer steps, grad
#             norm, EMA), then test_gpu_training
#   stemncu   the stem's own kernels under ncu in fp16 and bf16 (where their time goes)
#   fusedbn   batch norm fused into the 1x1 convolutions (cuDNN graphs scale_bias_relu_conv_genstats, dgrad_drelu_dbn,
#             dbn_apply, scale_bias_relu_wgrad) against the unfused passes, checked against an fp32 reference, on every stride-1 1x1 shape
#             (build/bench_fused_bn)
#   profile   one step's GPU kernels summed by name (ncu for amptrain, torch.profiler for PyTorch), batch 256,
#             AMP and exact fp32 (TF32 off on both sides): $OUT/profile_*.csv and the largest rows printed
#   profileamp, profilefp32  the same for one of the two
#   profilebf16  amptrain's b256 AMP step under ncu in fp16 and in bf16, summed by kernel name (no PyTorch)
#   decode    test_images_gpu (CUDA input_decode against the CPU reference), then --bench-data data.decode=device on
#             make_jpegs' folder (decode + augment img/s on the GPU, batch 256)
#   tvdecode  test_images_pil run by the torch python: amptrain's decoded pixels against torchvision.io.decode_jpeg (CPU)
#   decodelog 30 steps with data.decode=device and AMPTRAIN_DECODE_LOG=1: the decode thread's and decoder's phases
#   jpegloop  the loop at batch 256 AMP on 16,384 JPEGs (make_jpegs' 2048, linked 8 times) decoded on the GPU, then
#             synthetic data, then the JPEGs decoded on the host
#   scaling   launch/scaling on 1 and 2 GPUs, weak, AMP and fp32, batch 256, PyTorch DDP beside
#   scalingnet  the same with NCCL forced onto its socket transport (--simulate-network)
#   recipe    the modern recipe's features against PyTorch and torchvision (tests/parity/recipe_*.py), one
#             delimited block per feature: label smoothing, MixUp and CutMix (test_recipe_loss, then 20
#             graph-replayed steps with them on), model.init and --eval, the optimizer's decay groups, clipping and EMA
# Every stage runs even if an earlier one failed; the last lines summarise pass/fail per stage. More than 8
# files in $OUT (the device tool's limit) are packed into $OUT/results.tgz, bench.jsonl left beside it.
# The JPEG stages (fmnist, jpegs, jpegloop, recipe's --eval check) need libjpeg-turbo in the bundle: bash dev/devdeps-add-jpeg.sh .devdeps
# (the build stage prints whether CMake found it).
set -u
source .devdeps/env.sh
export NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
BENCH="$OUT/bench.jsonl"
declare -A result

stage_build() {
    cmake -S . -B build -DCMAKE_CUDA_ARCHITECTURES=90 >"$OUT/cmake.log" 2>&1 && grep 'amptrain:' "$OUT/cmake.log" &&
        cmake --build build -j 32 >"$OUT/build.log" 2>&1
}
stage_gputests() {
    AMPTRAIN_REQUIRE_GPU=1 ctest --test-dir build -L gpu -V >"$OUT/gputests.log" 2>&1
    local rc=$?
    grep -E "Checks:|parity|loss cpu|relative difference|tests passed|Failed|skipped" "$OUT/gputests.log" | tail -30
    return $rc
}
op_case_names() {  # test_gpu_ops' cases, one name a line, from its table in tests/gpu/test_gpu_ops.c
    sed -n 's/^ *{"\([a-z0-9_]*\)", test_[a-z0-9_]*, .*},$/\1/p' tests/gpu/test_gpu_ops.c
}
stage_gpuall() {  # (op_cases, below, runs each case; exported so that xargs' shells can call it)
    local cases rc=0
    cases=$(op_case_names)
    grep -q '^batchnorm' <<<"$cases" || { echo "stage gpuall: no batchnorm cases in test_gpu_ops.c's table"; return 1; }
    AMPTRAIN_REQUIRE_GPU=1 ctest --test-dir build -L gpu -E '^test_gpu_ops$' >"$OUT/gpuall_ctest.log" 2>&1 &
    local ctest_pid=$!
    export OUT; export -f op_cases
    { grep '^batchnorm' <<<"$cases"; grep -v '^batchnorm' <<<"$cases"; } |
        xargs -P "${GPUALL_JOBS:-6}" -I{} bash -c 'op_cases gpuall "$1"' _ {} || rc=1
    wait "$ctest_pid" || rc=1
    grep -E "tests passed|tests failed|\*\*\*|Skipped|Failed" "$OUT/gpuall_ctest.log" | tail -12
    return $rc
}
stage_parity() {
    mkdir -p /tmp/parity && python3 tests/parity/export_torchvision.py /tmp/parity/export.safetensors &&
        (cd /tmp/parity && AMPTRAIN_REQUIRE_GPU=1 AMPTRAIN_PARITY_FILE=/tmp/parity/export.safetensors \
            "$OLDPWD/build/test_torch_parity")
    local rc=$?
    # the test binary works in its scratch folder (tests write nowhere else): its checkpoint is there
    python3 tests/parity/check_checkpoint.py build/test-scratch/test_torch_parity/parity_cpu.safetensors \
        --expect /tmp/parity/export.safetensors &&
        return $rc
}
stage_diag() {  # per-step loss / scale / skips of a short ResNeXt-50 AMP run on 1 and 2 ranks
    local args=(configs/resnext50_32x4d_imagenet.yaml data.batch_size=64 data.train_size=2048 data.val_size=0
                train.steps=12 log.every=1 log.progress=never checkpoint.dir= checkpoint.every=0 log.metrics=
                train.warmup_steps=0)
    build/amptrain "${args[@]}" 2>&1 | grep -E "^step|summary"
    mpirun -np 2 build/amptrain "${args[@]}" 2>&1 | grep -E "^step|summary|error"
}
stage_dp2() {
    AMPTRAIN_TEST_BACKEND=cuda CK_FORK=no mpirun -np 2 build/test_data_parallel &&
        AMPTRAIN_TEST_BACKEND=cuda CK_FORK=no mpirun -np 2 build/test_kernel_choices &&
        AMPTRAIN_REQUIRE_GPU=1 build/test_nccl_faults  # starts its own mpirun -np 2; not under mpirun
}
amp_bench() {  # world batch amp
    local world=$1 batch=$2 amp=$3 tag="amptrain w$1 b$2 amp$3"
    local cmd=(build/amptrain configs/resnext50_32x4d_imagenet.yaml --bench --bench-tag "$tag"
               data.batch_size="$batch" amp.enabled="$([ "$amp" = 1 ] && echo true || echo false)" cudnn.benchmark=true)
    if [ "$world" = 1 ]; then "${cmd[@]}" | grep '^{' | tee -a "$BENCH"
    else mpirun -np "$world" "${cmd[@]}" | grep '^{' | tee -a "$BENCH"; fi
}
torch_bench() {  # world batch amp
    local world=$1 batch=$2 amp=$3 tag="torch w$1 b$2 amp$3 cl1"
    if [ "$world" = 1 ]; then python3 bench/torch_baseline.py --batch "$batch" --amp "$amp" --cl 1 --tag "$tag"
    else torchrun --standalone --nproc_per_node="$world" bench/torch_baseline.py --batch "$batch" --amp "$amp" --cl 1 --tag "$tag"
    fi 2>/dev/null | grep '^{' | tee -a "$BENCH"
}
torch_compile70() {  # torch.compile reduce-overhead (CUDA graphs) at batch 70, AMP: the other b70 target;
                     # its compilation bounded to 4 minutes
    timeout 240 python3 bench/torch_baseline.py --batch 70 --amp 1 --cl 1 --compile reduce-overhead \
        --tag "torch w1 b70 amp1 cl1 compile reduce-overhead" 2>/dev/null | grep '^{' | tee -a "$BENCH"
}
torch_tf32off256() {  # PyTorch eager fp32 at batch 256 with TF32 off everywhere
    python3 bench/torch_baseline.py --batch 256 --amp 0 --cl 1 --tf32 0 --tag "torch w1 b256 amp0 cl1 tf32off" \
        2>/dev/null | grep '^{' | tee -a "$BENCH"
}
bench_pairs() {  # world batch: amptrain and torch, AMP then fp32
    amp_bench "$1" "$2" 1; torch_bench "$1" "$2" 1
    amp_bench "$1" "$2" 0; torch_bench "$1" "$2" 0
}
stage_bench1() { bench_pairs 1 256; }
stage_bench2() { bench_pairs 2 256; }
stage_bench70() { bench_pairs 1 70; }
stage_bench70x2() { bench_pairs 2 70; }
stage_benchws() {  # AMP batch 256 with the convolution workspace capped at 1024 ... 128 MiB, torch beside
    for ws in 1024 512 256 128; do
        build/amptrain configs/resnext50_32x4d_imagenet.yaml --bench --bench-tag "amptrain w1 b256 amp1 ws$ws" \
            data.batch_size=256 cudnn.benchmark=true cudnn.workspace_mb=$ws | grep '^{' | tee -a "$BENCH"
    done
    torch_bench 1 256 1
}
loop_run() {  # batch amp(1|0) extra-overrides... : one JSON line from the loop's steady-state metrics
              # ($LOOP_BIN: the amptrain binary to run, build/amptrain unless set; $LOOP_TAG: a tag prefix)
    local batch=$1 amp=$2; shift 2
    local m="$OUT/loop_b${batch}_amp${amp}_$RANDOM.jsonl"
    # The config's synthetic data: 100 batches, no evaluation. An image source (a data.source override) has
    # the size of its files, and amptrain refuses sizes for it.
    local sizes=(data.train_size=$((batch * 100)) data.val_size=0)
    case " $* " in *" data.source="*) sizes=() ;; esac
    "${LOOP_BIN:-build/amptrain}" configs/resnext50_32x4d_imagenet.yaml data.batch_size="$batch" "${sizes[@]}" \
        train.steps=90 log.every=10 log.progress=never log.metrics="$m" checkpoint.dir= checkpoint.every=0 \
        amp.enabled="$([ "$amp" = 1 ] && echo true || echo false)" "$@" 2>&1 | grep -E "summary|error" >&2
    python3 - "$m" "$batch" "$amp" "${LOOP_TAG:-}$*" <<'PY' | tee -a "$BENCH"
import json, statistics, sys
records = list(map(json.loads, open(sys.argv[1])))
recs = [r for r in records if "step" in r and "images_per_s" in r]
steady = [r for r in recs if r["step"] >= 40]
ips = [r["images_per_s"] for r in steady]
summary = [r for r in records if r.get("summary")]
print(json.dumps({"tag": f"amptrain loop b{sys.argv[2]} amp{sys.argv[3]} {sys.argv[4]}".strip(), "impl": "amptrain-loop",
                  "img_s_median": round(statistics.median(ips), 1), "img_s_min": round(min(ips), 1),
                  "img_s_max": round(max(ips), 1),
                  "data_wait_ms": round(statistics.median(r["data_wait_ms"] for r in steady), 3),
                  "peak_mem_MiB": steady[-1]["memory_mib"],
                  **({"startup_s": summary[-1]["startup_s"]} if summary else {})}))
PY
}
stage_loop() {
    for rep in 1 2 3; do
        loop_run 256 1; amp_bench 1 256 1; torch_bench 1 256 1
        loop_run 70 1; amp_bench 1 70 1; torch_bench 1 70 1
    done
    # the b70 loop is held above torch.compile's reduce-overhead mode (CUDA graphs) too
    torch_compile70
}
stage_ab() {  # the loop before and after a change, alternating with PyTorch, b256 then b70 AMP, twice each:
              # $AMPTRAIN_BEFORE is the earlier build's binary (built on this machine from the earlier commit)
    [ -x "${AMPTRAIN_BEFORE:-}" ] || { echo "stage ab: set AMPTRAIN_BEFORE to the earlier amptrain binary"; return 1; }
    for batch in 256 70; do
        for rep in 1 2; do
            LOOP_BIN="$AMPTRAIN_BEFORE" LOOP_TAG="before " loop_run "$batch" 1
            LOOP_TAG="after " loop_run "$batch" 1
            torch_bench 1 "$batch" 1
        done
    done
}
stage_before() {  # the earlier side of an A/B: this tree with $BEFORE_FILES laid over it, built in /tmp/before
    local files=${BEFORE_FILES:-.devbefore/tree}
    [ -d "$files" ] || { echo "stage before: no folder $files (carry it)"; return 1; }
    rm -rf /tmp/before && mkdir -p /tmp/before &&
        tar cf - --exclude=./build --exclude=./.devbefore --exclude=./.git --exclude=./.fmnist . | tar xf - -C /tmp/before &&
        cp -r "$files/." /tmp/before/ && (cd "$files" && find . -type f | sed 's|^\./|  before: |') &&
        cmake -S /tmp/before -B /tmp/before/build -DCMAKE_CUDA_ARCHITECTURES=90 >"$OUT/before_cmake.log" 2>&1 &&
        cmake --build /tmp/before/build -j 32 --target amptrain bench_batchnorm >"$OUT/before_build.log" 2>&1 &&
        export AMPTRAIN_BEFORE=/tmp/before/build/amptrain
}
stage_bnab() {  # bench_batchnorm of this tree and of the before stage's build, alternating
    [ -x /tmp/before/build/bench_batchnorm ] || { echo "stage bnab: run stage before first"; return 1; }
    local rep side bin
    for rep in $(seq "${BNAB_REPS:-1}"); do
        for side in after before; do
            bin=build/bench_batchnorm; [ $side = before ] && bin=/tmp/before/build/bench_batchnorm
            timeout "${BNAB_TIMEOUT:-240}" "$bin" 256 >"$OUT/bnab_${side}_$rep.txt" 2>&1
            echo "$side $rep: $(grep -E "^one step's batch norm" "$OUT/bnab_${side}_$rep.txt" || echo "cut after $(($(wc -l <"$OUT/bnab_${side}_$rep.txt") - 2)) shapes")"
        done
    done
}
stage_bf16() {  # the b256 AMP loop in fp16 and bf16 alternating, twice, PyTorch (fp16 AMP) beside; the first run of
               # each fills the kernel-choice cache, so its start-up is the cold one and the second is warm
    for rep in $(seq "${BF16_REPS:-2}"); do
        loop_run 256 1; loop_run 256 1 amp.dtype=bfloat16
        if [ "$rep" = 1 ]; then torch_bench 1 256 1; fi
    done
}
stage_convbn() {  # the AMP loop at batch $CONVBN_BATCH (default 256) with batch norm fused into the 1x1 convolutions
                 # (forward and backward) where timed faster (cudnn.batch_norm auto) and never (unfused), alternating
                 # $CONVBN_REPS times (default 2), PyTorch beside; first --bench with the start-up choices logged to
                 # $OUT/convlog_convbn_b<batch>.txt
    local batch=${CONVBN_BATCH:-256}
    (export AMPTRAIN_CONV_LOG=1; amp_bench 1 "$batch" 1 2>"$OUT/convlog_convbn_b$batch.txt")
    grep -E "^(conv_bn|bn_conv_bn|bn_conv_bwd)" "$OUT/convlog_convbn_b$batch.txt" | head -60
    for rep in $(seq "${CONVBN_REPS:-2}"); do
        loop_run "$batch" 1; loop_run "$batch" 1 cudnn.batch_norm=unfused
        if [ "$rep" = 1 ]; then torch_bench 1 "$batch" 1; fi
    done
}
stage_startup() {  # start-up at b256 AMP: cold (cudnn.cache=off) with cudnn.batch_norm auto and unfused, then twice
                  # on the kernel-choice cache (the first fills it); each run's summary line gives its start-up
    loop_run 256 1 cudnn.cache=off; loop_run 256 1 cudnn.cache=off cudnn.batch_norm=unfused
    loop_run 256 1; loop_run 256 1
}
stage_recompute() {  # the b256 AMP loop at model.recompute_bn_blocks $RECOMPUTE_BLOCKS (default "2 8 16"): memory
                     # against speed, PyTorch beside; each also with cudnn.batch_norm=unfused when RECOMPUTE_UNFUSED=1
    local blocks
    for blocks in ${RECOMPUTE_BLOCKS:-2 8 16}; do
        loop_run 256 1 model.recompute_bn_blocks="$blocks"
        if [ "${RECOMPUTE_UNFUSED:-0}" = 1 ]; then
            loop_run 256 1 model.recompute_bn_blocks="$blocks" cudnn.batch_norm=unfused
        fi
    done
    torch_bench 1 256 1
}
stage_loopshort() {  # loop's rows in one short call: b256 loop twice beside torch and --bench, b70 loop twice
                     # beside torch twice and --bench (no torch.compile)
    loop_run 256 1; torch_bench 1 256 1; loop_run 256 1; amp_bench 1 256 1
    loop_run 70 1; torch_bench 1 70 1; loop_run 70 1; torch_bench 1 70 1; amp_bench 1 70 1
}
stage_loop1() {  # the --bench run also logs its convolution picks (AMPTRAIN_CONV_LOG) to $OUT/convlog_amp_b256.txt
    loop_run 256 1
    (export AMPTRAIN_CONV_LOG=1; amp_bench 1 256 1 2>"$OUT/convlog_amp_b256.txt")
    torch_bench 1 256 1
}
stage_loopfp32() {
    loop_run 256 0; amp_bench 1 256 0; torch_bench 1 256 0
    loop_run 256 0 cudnn.tf32=false
    build/amptrain configs/resnext50_32x4d_imagenet.yaml --bench --bench-tag "amptrain w1 b256 amp0 tf32off" \
        data.batch_size=256 amp.enabled=false cudnn.tf32=false | grep '^{' | tee -a "$BENCH"
    torch_tf32off256
}
stamp() { echo "--- $* ($(date -u +%H:%M:%S))"; }  # a stage's part, timed (UTC) as it starts
stage_criteria() {  # the training loop's performance targets in one call, each row timed (UTC) as it starts:
                    # b256 AMP loop / --bench / PyTorch; b70 --bench, then the loop and PyTorch alternating 3 times,
                    # torch.compile reduce-overhead; fp32 b256 loop and PyTorch at the defaults and TF32 off; the seed
    stamp b256 amp; loop_run 256 1; amp_bench 1 256 1; torch_bench 1 256 1
    stamp b70 amp; amp_bench 1 70 1
    for rep in 1 2 3; do loop_run 70 1; torch_bench 1 70 1; done
    stamp b70 compile
    torch_compile70
    stamp b256 fp32; loop_run 256 0; torch_bench 1 256 0
    loop_run 256 0 cudnn.tf32=false
    torch_tf32off256
    stamp seed; stage_seed
    stamp end
    python3 dev/criteria.py "$BENCH"
}
stage_criteriafused() {  # batch norm inside the convolutions: its targets in one call (dev/criteria.py --bars fused),
                        # each row timed (UTC) as it starts: the b256 AMP loop timing every kernel choice, then twice
                        # on the kernel-choice cache (the first run fills it), PyTorch; b70 loop and PyTorch
                        # alternating 3 times; the fp32 b256 loop and PyTorch at the defaults; one b256 AMP step's
                        # kernels under ncu beside PyTorch's (the batch-norm share)
    stamp b256 amp; loop_run 256 1 cudnn.cache=off; loop_run 256 1; loop_run 256 1; torch_bench 1 256 1
    stamp b70 amp
    for rep in 1 2 3; do loop_run 70 1; torch_bench 1 70 1; done
    stamp b256 fp32; loop_run 256 0; torch_bench 1 256 0
    stamp profile; stage_profileamp
    stamp end
    python3 dev/criteria.py --bars fused "$BENCH"
}
stage_seed() {  # rows to $BENCH: amptrain's (the loop's seconds, the seconds after the model build, which the
                # seed's script's clock matches, and the peak) and the seed's script's
    for amp in 1 0; do
        local m="$OUT/seed_amp$amp.jsonl"
        build/amptrain configs/seed_resnext50.yaml amp.enabled=$([ $amp = 1 ] && echo true || echo false) \
            log.metrics="$m" checkpoint.dir= 2>&1 | grep summary
        python3 dev/criteria.py --seed-row "$m" $amp | tee -a "$BENCH"
    done
    python3 bench/seed_torch.py 2>/dev/null | grep '^{' | tee -a "$BENCH"
}
stage_fmnist() {
    python3 tools/fashion-mnist /tmp/fmnist --idx .fmnist >"$OUT/fmnist-convert.log" 2>&1 || return 1
    build/amptrain configs/fashion_mnist.yaml data.path=/tmp/fmnist log.metrics="$OUT/fmnist.jsonl" \
        checkpoint.dir= checkpoint.every=0 log.progress=never 2>&1 | grep -E "^eval|summary|error"
}
# fmnistruns: the runs listed in $FMNIST_RUNS (a file: one run a line, "NAME CONFIG overrides...") side by side on
# the one GPU, each with its own metrics file and a wall-clock limit of $FMNIST_LIMIT_S (default 540) seconds;
# prints each run's evaluations (epoch, top-1, EMA top-1) and its summary line.
stage_fmnistruns() {
    [ -d /tmp/fmnist/train ] || python3 tools/fashion-mnist /tmp/fmnist --idx .fmnist >"$OUT/fmnist-convert.log" 2>&1 ||
        return 1
    local name cfg rest pids=()
    while read -r name cfg rest; do
        [ -z "$name" ] && continue
        # shellcheck disable=SC2086
        (timeout "${FMNIST_LIMIT_S:-540}" build/amptrain "$cfg" data.path=/tmp/fmnist log.metrics="$OUT/fm-$name.jsonl" \
            checkpoint.dir= checkpoint.every=0 log.progress=never $rest >"$OUT/fm-$name.log" 2>&1
         echo "rc $?" >>"$OUT/fm-$name.log") &
        pids+=($!)
    done <"$FMNIST_RUNS"
    wait "${pids[@]}"
    for f in "$OUT"/fm-*.log; do
        echo "--- $(basename "$f" .log)"
        grep -E "^eval|summary|error|^rc" "$f" | tail -8
    done
}
stage_emadiag() {  # dev/fmnist_ema_runs.txt's emaD with a checkpoint every epoch (dev/ema_inspect.py: the EMA's BN
                   # variances and weights against the raw model's) beside PyTorch's twin (dev/ema_torch_fmnist.py,
                   # torchvision's EMA on the same recipe, 14 epochs of the 40-epoch schedule)
    [ -d /tmp/fmnist/train ] || python3 tools/fashion-mnist /tmp/fmnist --idx .fmnist >"$OUT/fmnist-convert.log" 2>&1 ||
        return 1
    local cfg rest
    read -r _ cfg rest <dev/fmnist_ema_runs.txt
    rm -rf /tmp/emaD
    # shellcheck disable=SC2086
    (build/amptrain "$cfg" data.path=/tmp/fmnist $rest checkpoint.dir=/tmp/emaD checkpoint.every=469 checkpoint.keep=50 \
        log.metrics=/tmp/emaD.jsonl log.progress=never >"$OUT/emaD.log" 2>&1
     python3 dev/ema_inspect.py /tmp/emaD/step-*.safetensors >"$OUT/ema_inspect.txt" 2>&1) &
    local pid=$!
    python3 dev/ema_torch_fmnist.py .fmnist --stop-after 14 >"$OUT/ema_torch.txt" 2>&1; local rc=$?
    wait "$pid" || rc=1
    grep -E "^eval" "$OUT/emaD.log" | awk '{print "amptrain epoch", $3, "top-1", $9, "EMA top-1", $16}'
    grep -E "summary" "$OUT/emaD.log"
    sed -e 's|/tmp/emaD/||' "$OUT/ema_inspect.txt"
    cat "$OUT/ema_torch.txt"
    return $rc
}
make_jpegs() {  # 2048 photo-like 500x375 quality-90 JPEGs in /tmp/jpegs (ImageFolder, 8 classes)
    [ -d /tmp/jpegs/train ] && return 0
    python3 - <<'PY'
import numpy as np, os
from PIL import Image
rng = np.random.default_rng(0)
for i in range(2048):
    d = f"/tmp/jpegs/train/c{i % 8}"; os.makedirs(d, exist_ok=True)
    low = rng.integers(0, 256, (12, 16, 3), dtype=np.uint8)      # smooth structure, then texture
    img = np.asarray(Image.fromarray(low).resize((500, 375), Image.BICUBIC), dtype=np.int16)
    img = np.clip(img + rng.normal(0, 12, img.shape), 0, 255).astype(np.uint8)
    Image.fromarray(img).save(f"{d}/{i:05d}.jpg", quality=90)
PY
}
stage_jpegs() {  # --bench-data with the decode on the host's threads and on the GPU, then a short loop of each
    make_jpegs || return 1
    du -sh /tmp/jpegs
    local img=(configs/resnext50_32x4d_imagenet.yaml data.source=imagefolder data.path=/tmp/jpegs data.batch_size=256)
    for decode in host device; do
        build/amptrain "${img[@]}" data.decode=$decode --bench-data --bench-steps 16 | grep '^{' | tee -a "$BENCH"
    done
    for decode in host device; do
        build/amptrain "${img[@]}" data.decode=$decode train.steps=40 log.every=10 log.progress=never \
            log.metrics="$OUT/jpeg_loop_$decode.jsonl" checkpoint.dir= checkpoint.every=0 2>&1 | grep -E "summary|error"
        grep '"step":40' "$OUT/jpeg_loop_$decode.jsonl"
    done
}
ncu_step() {  # name amptrain-overrides...: one b256 step's kernels under ncu -> $OUT/ncu_NAME.csv; a run without
              # ncu first fills the kernel-choice cache, so that the profiled run takes the choices a run makes
              # (timed under ncu, each launch's overhead would decide them)
    local name=$1; shift
    build/amptrain configs/resnext50_32x4d_imagenet.yaml --bench --bench-warmup 1 --bench-steps 1 \
        data.batch_size=256 train.cuda_graph=off "$@" >/dev/null 2>"$OUT/ncu_${name}_choices.err"
    AMPTRAIN_CONV_LOG=1 ncu --profile-from-start off --clock-control none --metrics gpu__time_duration.sum --csv --page raw \
        --print-units base build/amptrain configs/resnext50_32x4d_imagenet.yaml --bench --bench-profile \
        --bench-warmup 3 --bench-steps 1 data.batch_size=256 train.cuda_graph=off "$@" \
        >"$OUT/ncu_$name.csv" 2>"$OUT/ncu_$name.err"
    grep -c "from the cache" "$OUT/ncu_$name.err" | sed 's/^/choices taken from the cache under ncu: /'
}
profile_pair() {  # name amptrain-overrides... -- torch-flags...
    local name=$1; shift
    local ours=() theirs=()
    while [ "$1" != "--" ]; do ours+=("$1"); shift; done; shift; theirs=("$@")
    ncu_step "$name" "${ours[@]}"
    python3 bench/torch_baseline.py --batch 256 --cl 1 --warmup 3 --steps 1 --profile "$OUT/profile_torch_$name.csv" \
        "${theirs[@]}" | grep '^{'
    local text  # the listing, and the step's row for dev/criteria.py ("amptrain profile b256 NAME") to $BENCH
    text=$(python3 dev/kernel_profile.py --row "amptrain profile b256 $name" "$OUT/ncu_$name.csv" \
        "$OUT/profile_amptrain_$name.csv" "$OUT/profile_torch_$name.csv") || { echo "$text"; return 1; }
    grep -v '^{' <<<"$text"; grep '^{' <<<"$text" >>"$BENCH"
}
stage_bnbench() {
    build/bench_batchnorm 256 | tee "$OUT/bnbench.txt"; [ "${PIPESTATUS[0]}" = 0 ] || return 1
    for bn in cudnn own auto; do  # auto's picks (AMPTRAIN_CONV_LOG) go to $OUT/picks_auto.txt
        AMPTRAIN_CONV_LOG=$([ $bn = auto ] && echo 1 || echo 0) build/amptrain configs/resnext50_32x4d_imagenet.yaml \
            --bench --bench-tag "amptrain w1 b256 amp true bn $bn" data.batch_size=256 amp.enabled=true \
            cudnn.benchmark=true cudnn.batch_norm=$bn 2>>"$OUT/picks_$bn.txt" | grep '^{' | tee -a "$BENCH"
    done
    torch_bench 1 256 1
}
op_cases() {  # prefix case...: test_gpu_ops' cases one at a time (log $OUT/prefix_case.log), a line each;
              # fails when one fails
    local prefix=$1 rc=0 case; shift
    for case in "$@"; do
        CK_FORK=no CK_RUN_CASE=$case AMPTRAIN_REQUIRE_GPU=1 build/test_gpu_ops >"$OUT/${prefix}_$case.log" 2>&1 || rc=1
        echo "$case: $(grep -E "Checks:" "$OUT/${prefix}_$case.log")"; grep -E ":F:|:E:" "$OUT/${prefix}_$case.log" | head -5
    done
    return $rc
}
stage_ends() {
    op_cases ends bn_add_bn; local rc=$?
    build/bench_batchnorm 256 ends | tee "$OUT/bnbench_ends.txt"; [ "${PIPESTATUS[0]}" = 0 ] && return $rc
}
stage_bwdstreams() {  # bench_bwd_streams at batch 70 and 256: each convolution's weight gradient beside its
                     # data gradient on a second stream, against the two in turn
    local rc=0
    build/bench_bwd_streams 70 | tee "$OUT/bwdstreams_b70.txt" || rc=1
    build/bench_bwd_streams 256 | tee "$OUT/bwdstreams_b256.txt" || rc=1
    return $rc
}
stage_groupedconv() {  # bench_grouped_conv at batch 256 and 70
    local rc=0
    build/bench_grouped_conv 256 | tee "$OUT/groupedconv_b256.txt"; [ "${PIPESTATUS[0]}" = 0 ] || rc=1
    build/bench_grouped_conv 70 | tee "$OUT/groupedconv_b70.txt"; [ "${PIPESTATUS[0]}" = 0 ] || rc=1
    return $rc
}
stage_bntests() {  # test_gpu_ops' batch-norm cases alone (every dtype, mode and shape; bn_add_bn)
    op_cases bntests $(op_case_names | grep '^batchnorm') bn_add_bn
}
stage_bnconv() {  # test_gpu_ops' cases of batch norm fused into the 1x1 convolutions, forward and backward
    op_cases bnconv conv_bn bn_conv_bn bn_conv_backward_data
}
stage_stem() {  # the stem's padded channels: test_gpu_ops' conv and conv_padded cases, then which route each
                # direction of the stem took in fp16 and bf16 (a short --bench with AMPTRAIN_CONV_LOG=1)
    local rc=0 dtype
    op_cases stem conv conv_padded conv_own || rc=1
    for dtype in float16 bfloat16; do
        AMPTRAIN_CONV_LOG=1 build/amptrain configs/resnext50_32x4d_imagenet.yaml --bench --bench-steps 5 \
            data.batch_size=256 amp.dtype=$dtype --bench-tag "amptrain w1 b256 $dtype stem" 2>"$OUT/stem_convlog_$dtype.txt" |
            grep '^{' || rc=1
        grep -E "c [348]->64 k7|padded to|stem kernels" "$OUT/stem_convlog_$dtype.txt"
    done
    return $rc
}
stage_opcases() {  # test_gpu_ops' cases named in $OP_CASES (default: the launch code outside batch norm), one
                   # log each, then test_gpu_training
    local rc=0
    # shellcheck disable=SC2086 # the cases are words
    op_cases op ${OP_CASES:-cast conv maxpool avgpool nonfinite_check sgd_step grad_norm ema_update} || rc=1
    CK_FORK=no AMPTRAIN_REQUIRE_GPU=1 build/test_gpu_training >"$OUT/gpu_training.log" 2>&1 || rc=1
    echo "test_gpu_training: $(grep -E "Checks:" "$OUT/gpu_training.log")"; grep -E ":F:|:E:" "$OUT/gpu_training.log" | head -5
    return $rc
}
stage_stemncu() {  # amptrain's own stem kernels under ncu (their first launch in the b256 search), in $STEMNCU_DTYPES
                   # (default bfloat16): speed of light, warp stalls, shared-memory traffic -> $OUT/stemncu_*.txt
    local rc=0 dtype kernel
    for dtype in ${STEMNCU_DTYPES:-bfloat16}; do
        for kernel in forward wgrad; do
            ncu -k regex:"stem_${kernel}_kernel" --launch-count 1 --section SpeedOfLight --section Occupancy \
                --section WarpStateStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
                --section LaunchStats build/amptrain configs/resnext50_32x4d_imagenet.yaml --bench --bench-steps 1 \
                --bench-warmup 1 data.batch_size=256 amp.dtype=$dtype cudnn.cache=off \
                >"$OUT/stemncu_${dtype}_$kernel.txt" 2>&1 || rc=1
            grep -E "stem_|Duration|Throughput|Stall|Achieved Occupancy|Registers Per|Block Limit" \
                "$OUT/stemncu_${dtype}_$kernel.txt" | head -30
        done
    done
    return $rc
}
stage_fusedbn() { build/bench_fused_bn 256 | tee "$OUT/fusedbn.txt"; return "${PIPESTATUS[0]}"; }
stage_profileamp() { profile_pair amp -- --amp 1; }
stage_profilefp32() { profile_pair fp32exact amp.enabled=false cudnn.tf32=false -- --amp 0 --tf32 0; }
stage_profile() { stage_profileamp && stage_profilefp32; }
stage_profilebf16() {  # amptrain's b256 AMP step in fp16 and in bf16 (no PyTorch): bf16's kernels beside fp16's total
    ncu_step fp16 && ncu_step bf16 amp.dtype=bfloat16 &&
        python3 dev/kernel_profile.py "$OUT/ncu_fp16.csv" "$OUT/profile_amptrain_fp16.csv" &&
        python3 dev/kernel_profile.py "$OUT/ncu_bf16.csv" "$OUT/profile_amptrain_bf16.csv" "$OUT/profile_amptrain_fp16.csv"
}
stage_decode() {  # the device decode path: test_images_gpu (nvJPEG + kernels against the CPU reference), then
                  # --bench-data with data.decode=device on make_jpegs' folder, batch 256
    AMPTRAIN_REQUIRE_GPU=1 build/test_images_gpu; local rc=$?
    make_jpegs && build/amptrain configs/resnext50_32x4d_imagenet.yaml data.source=imagefolder data.path=/tmp/jpegs \
        data.batch_size=256 data.decode=device --bench-data --bench-steps 8 | grep '^{' | tee -a "$BENCH" && return $rc
}
stage_tvdecode() {  # test_images_pil with the machine's torch python: decoded pixels against torchvision.io.decode_jpeg
    AMPTRAIN_PIL_PYTHON="$(command -v python3)" build/test_images_pil
}
stage_decodelog() {  # where a device decode beside the step spends its time: 30 steps at b256 AMP on make_jpegs'
                     # folder with AMPTRAIN_DECODE_LOG=1; the last 24 lines (decode thread and decoder phases)
    make_jpegs || return 1
    AMPTRAIN_DECODE_LOG=1 build/amptrain configs/resnext50_32x4d_imagenet.yaml data.source=imagefolder \
        data.path=/tmp/jpegs data.decode=device data.batch_size=256 train.steps=30 log.progress=never \
        log.metrics= checkpoint.dir= checkpoint.every=0 2>"$OUT/decodelog.txt" | grep -E "summary|error"
    grep -E "^decode" "$OUT/decodelog.txt" | tail -24
}
jpegs8() {  # make_jpegs' 2048 files, each linked 8 times into /tmp/jpegs8 (16,384 files: 1.4 epochs in 90 steps)
    make_jpegs || return 1
    [ -d /tmp/jpegs8/train ] && return 0
    mkdir -p /tmp/jpegs8/train
    for c in /tmp/jpegs/train/c*; do
        mkdir -p "/tmp/jpegs8/train/${c##*/}"
        for k in 0 1 2 3 4 5 6 7; do for f in "$c"/*.jpg; do ln "$f" "/tmp/jpegs8/train/${c##*/}/$k-${f##*/}"; done; done
    done
}
stage_jpegloop() {  # the loop on 16,384 JPEGs (the 2048 of make_jpegs, each linked 8 times: 1.4 epochs in 90
                    # steps, so epoch ends do not dominate) beside the same loop on synthetic data
    jpegs8 || return 1
    loop_run 256 1 data.source=imagefolder data.path=/tmp/jpegs8 data.decode=device
    loop_run 256 1
    loop_run 256 1 data.source=imagefolder data.path=/tmp/jpegs8 data.decode=host
}
stage_recipe() {  # each feature's block sets rc=1 when its check fails; every block runs
    local rc=0
    mkdir -p /tmp/recipe
    # ---- loss: label smoothing, MixUp, CutMix ------------------------------------------------------------
    python3 tests/parity/recipe_loss.py /tmp/recipe/loss.safetensors &&
        AMPTRAIN_REQUIRE_GPU=1 AMPTRAIN_RECIPE_LOSS_FILE=/tmp/recipe/loss.safetensors build/test_recipe_loss || rc=1
    build/amptrain configs/resnext50_32x4d_imagenet.yaml data.batch_size=128 data.train_size=2560 data.val_size=0 \
        train.steps=20 log.every=5 log.progress=never log.metrics= checkpoint.dir= checkpoint.every=0 \
        data.mixup_alpha=0.2 data.cutmix_alpha=1.0 train.label_smoothing=0.1 2>&1 | grep -E "^step|summary|error"
    [ "${PIPESTATUS[0]}" = 0 ] || rc=1
    # ---- end of loss -------------------------------------------------------------------------------------
    # ---- BEGIN model.init and --eval (tests/parity/recipe_finetune.py) ----
    python3 tests/parity/recipe_finetune.py --amptrain build/amptrain --work /tmp/recipe_finetune \
        >"$OUT/recipe_finetune.log" 2>&1 || rc=1
    grep -E "^(ok|FAIL) |^recipe_finetune:" "$OUT/recipe_finetune.log"
    # ---- END model.init and --eval ----
    # ---- recipe: optimizer (train.norm_weight_decay, train.clip_grad_norm, train.ema_decay) --------------
    # torch SGD with torchvision's decay groups, clip_grad_norm_ and ExponentialMovingAverage against
    # amptrain's steps on the same gradients (CPU and CUDA); then a ResNeXt-50 run with all three on, whose
    # checkpoint torchvision loads, the EMA into AveragedModel.
    mkdir -p /tmp/parity && python3 tests/parity/recipe_optim.py /tmp/parity/recipe_optim.safetensors &&
        AMPTRAIN_REQUIRE_GPU=1 AMPTRAIN_RECIPE_OPTIM_FILE=/tmp/parity/recipe_optim.safetensors \
            build/test_recipe_optim_parity | grep -E "recipe_optim|Checks|skipped" || rc=1
    rm -rf /tmp/recipe_optim_run
    build/amptrain configs/resnext50_32x4d_imagenet.yaml data.source=synthetic data.batch_size=32 data.val_size=64 \
        data.train_size=128 train.epochs=1 train.norm_weight_decay=0 train.clip_grad_norm=1 train.ema_decay=0.99998 \
        train.ema_every=2 train.warmup_steps=1 log.every=1 log.progress=never checkpoint.dir=/tmp/recipe_optim_run \
        log.metrics=/tmp/recipe_optim_run/metrics.jsonl 2>&1 | grep -E "^eval|summary|error" || rc=1
    grep -c '"grad_norm"' /tmp/recipe_optim_run/metrics.jsonl || rc=1
    python3 tests/parity/check_checkpoint.py /tmp/recipe_optim_run/last.safetensors || rc=1
    # ---- end recipe: optimizer ------------------------------------------------------------------------
    return $rc
}
scaling_run() {  # out-folder extra-flags...
    local out=$1; shift
    python3 launch/scaling --config configs/resnext50_32x4d_imagenet.yaml --gpus 1,2 --precisions amp,fp32 \
        --batch 256 --steps 30 --warmup 8 --torch-baseline bench/torch_baseline.py --out "$out" "$@" \
        -- cudnn.benchmark=true cudnn.tf32=true && cat "$out/scaling.md"
}
stage_scaling() { scaling_run "$OUT/scaling"; }
stage_scalingnet() { scaling_run "$OUT/scaling-net" --simulate-network; }

nvidia-smi -L
for s in "$@"; do
    echo "=== $s ($(date -u +%H:%M:%S))"
    if "stage_$s"; then result[$s]=pass; else result[$s]=FAIL; fi
done
echo "=== summary"
for s in "$@"; do echo "$s: ${result[$s]}"; done
# The device tool brings back at most 8 files from $OUT: past that, everything but bench.jsonl goes into
# $OUT/results.tgz (read it with tar xzf).
if [ "$(find "$OUT" -maxdepth 1 -type f ! -name results.tgz | wc -l)" -gt 8 ]; then
    (cd "$OUT" && find . -maxdepth 1 -type f ! -name bench.jsonl ! -name results.tgz ! -name .packed -printf '%P\n' >.packed &&
        tar czf results.tgz -T .packed && xargs rm -f <.packed && rm -f .packed) &&
        echo "$OUT: files packed into results.tgz"
fi
