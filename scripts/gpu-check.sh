#!/usr/bin/env bash
# The GPU check, on a machine with an NVIDIA GPU, in two passes that each fit one 10-minute call:
#   bash scripts/gpu-check.sh [--out DIR] [--step-timeout S] [--long] [BUILD_DIR]
# The quick pass (the default): the GPU tests (*_gpu_test), the *_gpu_mpi_test binaries at 2 ranks
# sharing GPU 0, the end-to-end GPU scripts (tests/*_gpu_test.sh), the NCCL collective benchmark on
# one GPU, the CNN training benchmark (fp32) at global batch 128 and 1024 (and at 1024 with the
# first layer fused, fp32 and bf16: LOCKSTEP_CUDA_CONV_POOL=fused), and a --trace run at
# each batch summarised by scripts/trace-summary.py (the device's time per layer, and how much of
# each step the compute stream sat idle).
# --long: the long runs: the CNN in bf16 at both batches, the same model in PyTorch (eager,
# torch.compile, torch.compile with CUDA graphs) and JAX (scripts/reference, where python3 has
# them) at both batches in fp32 and bf16, GPT-2 small's shape (gpt:small) in fp32 and bf16 on
# random bytes, and fp32 and bf16 accuracy runs, Lockstep and PyTorch (LOCKSTEP_GPU_PARTS: some,
# in its order).
# The build: BUILD_DIR, else $LOCKSTEP_BUILD_DIR, else the pack's (scripts/gpu-pack.sh), else
# build-gpu/; a folder without the GPU test binaries is built with LOCKSTEP_CUDA=ON. .device/env.sh
# (the pack's run-time libraries: MPI, HDF5, ...) is sourced first when it exists.
# Results: a line per step as it ends, then a table (each row ending with the seconds the step
# took, to plan a GPU window by). DIR (--out, else $LOCKSTEP_GPU_OUT, else $OUT
# where set, else a new folder under /tmp) receives gpu-check-PASS.txt (the table) and
# gpu-check-PASS-logs.tar.gz (each step's log), rewritten after every step so that a run cut short
# still leaves them. Each step is stopped after S seconds (--step-timeout, else
# $LOCKSTEP_GPU_STEP_TIMEOUT, else 300; a build gets three times as long) and fails.
# Exit codes: 0 every step passed; 1 a step failed (where nvidia-smi lists a GPU, a GPU test that
# skips fails: a driver/runtime mismatch must not pass); 2 bad arguments; 3 no GPU: nvidia-smi lists
# none, the GPU tests skipped with their reason, the GPU steps failed at once, nothing else failed.
# Environment: LOCKSTEP_GPU_BENCH_ARGS (collective sizes, default '-b 8 -e 1G -f 2'),
# LOCKSTEP_GPU_DATA (training data; default: the pack's Fashion-MNIST, else
# data/fashion-mnist.h5, else synthetic data), LOCKSTEP_GPU_EPOCHS (accuracy runs, default 5),
# LOCKSTEP_GPU_PARTS (the --long pass's parts in order, default all: multi-rank bf16 im2col
# no-graphs cudnn-any conv-pool file-reads peers-fp32 peers-bf16 gpt gpt-kernels llmc generate
# gpt-loss accuracy),
# LOCKSTEP_GPU_PEERS (which
# peers those parts run).
root=$(cd "$(dirname "$0")/.." && pwd)
usage() { echo "gpu-check: $1 (usage: gpu-check.sh [--out DIR] [--step-timeout S] [--long] [BUILD_DIR])" >&2; exit 2; }
pass=quick
out=${LOCKSTEP_GPU_OUT:-${OUT:-}}
step_timeout=${LOCKSTEP_GPU_STEP_TIMEOUT:-300}
build_arg=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --out) [[ -n ${2:-} ]] || usage "--out needs a folder"; out=$2; shift 2 ;;
    --step-timeout) step_timeout=${2:-}; shift 2 ;;
    --long) pass=long; shift ;;
    -h|--help) sed -n '2,/^root=/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) usage "unknown option '$1'" ;;
    *) [[ -z $build_arg ]] || usage "one build folder only"; build_arg=$1; shift ;;
  esac
done
[[ $step_timeout =~ ^[1-9][0-9]*$ ]] || usage "--step-timeout must be a positive number of seconds"
cd "$root" || exit 1
# Sourced before `set -u`: it extends variables that may be unset (LD_LIBRARY_PATH).
# shellcheck source=/dev/null
if [[ -f .device/env.sh ]]; then . .device/env.sh || exit 1; fi
set -uo pipefail
build=$(realpath -m "${build_arg:-${LOCKSTEP_BUILD_DIR:-${LOCKSTEP_PACK_BUILD:-$root/build-gpu}}}")
bench_sizes=${LOCKSTEP_GPU_BENCH_ARGS:--b 8 -e 1G -f 2}
train_data=${LOCKSTEP_GPU_DATA:-${LOCKSTEP_PACK_DATA:-data/fashion-mnist.h5}}
train_data_or_synthetic=$train_data
[[ -f "$train_data" ]] || train_data_or_synthetic=synthetic
accuracy_epochs=${LOCKSTEP_GPU_EPOCHS:-5}
mpiexec=${MPIEXEC:-mpiexec}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_hwloc_base_binding_policy=none
logs=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check-logs-XXXXXX")
# Data and checkpoints the steps make, kept out of the logs (which are packed after every step).
work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check-work-XXXXXX")
[[ -n $out ]] || out=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check-XXXXXX")
mkdir -p "$out" || usage "cannot make the output folder $out"
out=$(cd "$out" && pwd)
summary="$out/gpu-check-$pass.txt"

rows=()
failed=0
# The table, and every log so far, into the output folder.
write_summary() {
  {
    printf '%-40s %-8s %s\n' "step" "result" "detail"
    local row step result detail took
    for row in "${rows[@]}"; do
      IFS=$'\t' read -r step result took detail <<<"$row"
      printf '%-40s %-8s %s [%s s]\n' "$step" "$result" "${detail:0:300}" "$took"
    done
  } >"$summary"
  tar -C "$logs" -czf "$out/gpu-check-$pass-logs.tar.gz" . 2>/dev/null
}
# record STEP RESULT DETAIL: one row of the table, with the seconds since the row before (what the
# step took: a GPU window is planned by them); RESULT "failed" makes the exit 1.
last_record=$SECONDS
record() {
  local took=$((SECONDS - last_record))
  last_record=$SECONDS
  rows+=("$1"$'\t'"$2"$'\t'"$took"$'\t'"$3")
  [[ "$2" == failed ]] && failed=1
  printf '== %s: %s %s [%s s]\n' "$1" "$2" "$3" "$took"
  write_summary
}

# step SECONDS LOG CMD...: runs CMD with its output in LOG, stopped after SECONDS; returns its
# exit status, 124 when it timed out.
step() {
  local seconds=$1 log=$2
  shift 2
  timeout -k 10 "$seconds" "$@" >"$log" 2>&1
  local rc=$?
  [[ $rc -eq 137 ]] && rc=124
  [[ $rc -eq 124 ]] && echo "gpu-check: timed out after $seconds s" >>"$log"
  return $rc
}

# The throughput figures of a lockstep-bench train or scripts/reference output, on one line.
figures() {
  grep -aoE '^(samples_per_second|step_ms_median|achieved_gflops)=[0-9.]+' "$1" | tr '\n' ' '
}

# The first line of LOG that reports an error, else its last line.
first_error() {
  grep -m1 -aiE 'error|timed out' "$1" || tail -1 "$1"
}

# gpu_step NAME RC LOG OK_DETAIL: records a step that needs a GPU. Without one, a quick failure
# is what should happen ("no-gpu"); a time-out never is.
gpu_step() {
  local name=$1 rc=$2 log=$3 detail=$4
  if [[ $rc -eq 0 ]]; then
    record "$name" ok "$detail"
  elif [[ $rc -eq 124 ]]; then
    record "$name" failed "timed out after $step_timeout s"
  elif [[ $gpu_present -eq 0 ]]; then
    record "$name" no-gpu "$(first_error "$log")"
  else
    record "$name" failed "$(first_error "$log")"
  fi
}

# run_gtest NAME LOG CMD...: runs a GoogleTest binary (directly or through mpiexec) and records
# passed / skipped (exit 77, or every test skipped) / failed, with the first skip reason or failure.
run_gtest() {
  local name=$1 log=$2
  shift 2
  step "$step_timeout" "$log" "$@"
  local rc=$? detail passed skipped
  passed=$(grep -aoE '\[  PASSED  \] [0-9]+' "$log" | head -1 | grep -oE '[0-9]+$')
  skipped=$(grep -aoE '\[  SKIPPED \] [0-9]+ test' "$log" | head -1 | grep -oE '[0-9]+')
  if [[ $rc -eq 77 ]] || [[ $rc -eq 0 && "${passed:-0}" == 0 && "${skipped:-0}" != 0 ]]; then
    detail=$(grep -aA1 ': Skipped$' "$log" | grep -av ': Skipped$' | grep -av '^--$' | head -1)
    skip_result "$name" "${detail:-see $(basename "$log")}"
  elif [[ $rc -eq 0 ]]; then
    record "$name" passed "${passed:-?} tests${skipped:+, $skipped skipped}"
  elif [[ $rc -eq 124 ]]; then
    record "$name" failed "timed out after $step_timeout s"
  else
    detail=$(grep -aE 'Failure|error:|\[  FAILED  \]' "$log" | head -1)
    record "$name" failed "exit $rc: ${detail:-see $(basename "$log")}"
  fi
}

# e2e_script SCRIPT: an end-to-end GPU script over the built apps, recorded by its exit status.
e2e_script() {
  local name rc
  name=$(basename "$1" .sh)
  LOCKSTEP_BIN="$build/apps" LOCKSTEP_SRC="$root" MPIEXEC="$mpiexec" \
    step "$step_timeout" "$logs/$name.log" bash "$1"
  rc=$?
  case $rc in
    0) record "$name" passed "$(grep -a '^ok: ' "$logs/$name.log" | cut -c5-80 | tr '\n' ';')" ;;
    77) skip_result "$name" "$(grep -a -m1 'skipped' "$logs/$name.log" | sed 's/^skipped: //')" ;;
    124) record "$name" failed "timed out after $step_timeout s" ;;
    *) record "$name" failed "exit $rc: $(grep -a -m1 'FAIL' "$logs/$name.log" || tail -1 "$logs/$name.log")" ;;
  esac
  cat "$logs/$name.log"
}

# A GPU test that skips where a GPU is listed hides a broken driver or runtime: that fails.
skip_result() {
  if [[ $gpu_present -eq 1 ]]; then
    record "$1" failed "skipped although nvidia-smi lists a GPU: $2"
  else
    record "$1" skipped "$2"
  fi
}

echo "== gpu-check ($pass pass): build $build, results in $out"
gpu_present=0
if ! command -v nvidia-smi >/dev/null; then
  gpu="nvidia-smi not found"
elif gpu=$(timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1) &&
     [[ -n $gpu ]]; then
  gpu_present=1
  gpu=$(head -1 <<<"$gpu")
else
  gpu="nvidia-smi lists no GPU: $(head -1 <<<"$gpu")"
fi
record "gpu" info "$gpu"

# ---- build (or reuse) ----
if [[ -x "$build/tests/collectives_gpu_test" ]]; then
  record "build" reused "$build"
elif LOCKSTEP_CUDA=ON LOCKSTEP_BUILD_DIR="$build" step $((3 * step_timeout)) "$logs/build.log" \
       bash "$root/scripts/build.sh"; then
  record "build" built "$build (LOCKSTEP_CUDA=ON)"
else
  record "build" failed "see build.log: $(first_error "$logs/build.log")"
fi

bench="$build/apps/lockstep-bench"
data_args=()
[[ -f "$train_data" ]] && data_args=(--data "$train_data")

# bench_train BATCH PRECISION [ARGS...]: lockstep-bench train on the GPU, 200 timed steps; ARGS
# go to lockstep-bench, and they, LOCKSTEP_CUDA_CONV, LOCKSTEP_CUDNN_DETERMINISTIC and
# LOCKSTEP_CUDA_CONV_POOL (when set) into the step's name. Its log
# holds the convolution layers' timed choices (debug level).
bench_train() {
  local batch=$1 precision=$2
  shift 2
  local tag="$*${LOCKSTEP_CUDA_CONV:+ conv $LOCKSTEP_CUDA_CONV}${LOCKSTEP_CUDNN_DETERMINISTIC:+ cudnn deterministic $LOCKSTEP_CUDNN_DETERMINISTIC}${LOCKSTEP_CUDA_CONV_POOL:+ first layer $LOCKSTEP_CUDA_CONV_POOL}"
  local log="$logs/bench_train_${batch}_${precision}${tag:+_${tag//[^a-z0-9]/}}.log"
  # Debug logging: the convolution layers' choices of kernel family, with their times.
  LOCKSTEP_LOG_LEVEL=debug step "$step_timeout" "$log" "$bench" train --device cuda \
    --precision "$precision" --model cnn --global-batch "$batch" --steps 200 --warmup 20 \
    "${data_args[@]}" "$@"
  gpu_step "lockstep cnn $precision, batch $batch${tag:+ (${tag# })}" $? "$log" "$(figures "$log")"
  cat "$log"
}

# trace_train BATCH PRECISION: lockstep-train --trace on the GPU, 60 steps of the CNN, and where
# the device's time went (scripts/trace-summary.py: per layer, and the compute stream's idle share).
trace_train() {
  local log="$logs/trace_$1_$2.log" trace="$logs/trace_$1_$2.json"
  # lockstep-train reads a file: without the data set, Fashion-MNIST's shape made here.
  local data=("${data_args[@]}")
  if [[ ${#data[@]} -eq 0 ]]; then
    data=(--data "$work/synthetic.h5")
    if [[ ! -f $work/synthetic.h5 ]] &&
       ! "$build/apps/lockstep-data" synthetic --out "$work/synthetic.h5" --samples 16384 >"$log" 2>&1; then
      record "trace cnn $2, batch $1" failed "lockstep-data synthetic: $(first_error "$log")"
      return
    fi
  fi
  step "$step_timeout" "$log" "$build/apps/lockstep-train" --device cuda --precision "$2" \
    --model cnn --global-batch "$1" --steps 60 --progress none --trace "$trace" "${data[@]}"
  local rc=$?
  if [[ $rc -eq 0 ]]; then
    LD_LIBRARY_PATH=${LOCKSTEP_SYSTEM_LD_LIBRARY_PATH-${LD_LIBRARY_PATH-}} \
      python3 "$root/scripts/trace-summary.py" "$trace" --skip-steps 10 >>"$log" 2>&1 || rc=1
    gzip -f "$trace"
  fi
  gpu_step "trace cnn $2, batch $1" "$rc" "$log" "$(grep -aoE 'busy [0-9.]+ ms of the [0-9.]+ ms .*%' "$log")"
  cat "$log"
}

quick_pass() {
  # The gtest binaries ctest labels gpu, run directly so that a build folder from another machine
  # (whose ctest files name other paths) works too.
  shopt -s nullglob
  local gpu_tests=("$build"/tests/*_gpu_test) shared_tests=() t name rc
  # NCCL with peers needs its own launch (the part multi-rank).
  for t in "$build"/tests/*_gpu_mpi_test; do
    [[ $t == */nccl_hosts_gpu_mpi_test ]] || shared_tests+=("$t")
  done
  [[ ${#gpu_tests[@]} -eq 0 ]] && record "gpu tests" failed "no *_gpu_test binary in $build/tests"
  for t in "${gpu_tests[@]}"; do
    name=$(basename "$t")
    run_gtest "$name" "$logs/$name.log" "$t" --gtest_color=no
  done
  # 2 ranks sharing GPU 0 through the MPI backend (NCCL refuses two ranks on one GPU).
  [[ ${#shared_tests[@]} -eq 0 ]] && record "gpu mpi tests" failed "no *_gpu_mpi_test binary in $build/tests"
  for t in "${shared_tests[@]}"; do
    run_gtest "$(basename "$t") -n 2" "$logs/$(basename "$t")_np2.log" \
      "$mpiexec" -n 2 --oversubscribe "$t" --gtest_color=no
  done
  # End-to-end GPU scripts over the built apps.
  for t in "$root"/tests/*_gpu_test.sh; do e2e_script "$t"; done

  # One rank on one GPU: bus bandwidth is 0 by definition (nccl-tests: factor (n-1)/n), so the
  # table shows the smallest size's latency and the largest size's algorithm bandwidth.
  local log="$logs/bench_nccl.log" figures_nccl wrong
  # shellcheck disable=SC2086  # the sizes are several words on purpose
  step "$step_timeout" "$log" "$bench" collectives --backend nccl $bench_sizes
  rc=$?
  if [[ $rc -eq 0 ]]; then
    figures_nccl=$(awk '/^# [a-z_]+ +busbw =/ { c = $2 }
                   /^ +[0-9]/ && c != "" {
                     if (!(c in lat)) { lat[c] = $7; small[c] = $1; order[++n] = c }
                     bw[c] = $9; large[c] = $1 }
                   END { for (i = 1; i <= n; i++) { c = order[i]
                           printf "%s%s %sus@%sB %sGB/s@%sB", (i > 1 ? "; " : ""), c, lat[c],
                                  small[c], bw[c], large[c] } }' "$log")
    wrong=$(grep -aoE '^# wrong values: [0-9]+' "$log" | grep -oE '[0-9]+$')
    [[ "${wrong:-1}" == 0 ]] || { rc=1; echo "wrong values: ${wrong:-?}" >>"$log"; }
  fi
  gpu_step "bench collectives nccl (1 GPU)" "$rc" "$log" "${figures_nccl:-}"
  cat "$log"
  bench_train 128 fp32
  bench_train 1024 fp32
  # The first layer fused with its pool (LOCKSTEP_CUDA_CONV_POOL=fused; not yet the default) beside
  # the runs above, so that even a window with time for the quick pass alone compares them.
  LOCKSTEP_CUDA_CONV_POOL=fused bench_train 1024 fp32
  LOCKSTEP_CUDA_CONV_POOL=fused bench_train 1024 bf16
  trace_train 128 fp32
  trace_train 1024 fp32
}

# peer FRAMEWORK MODE PRECISION BATCH [ARGS...]: the same model in scripts/reference on the
# machine's own python3 and libraries (FRAMEWORK torch or jax; MODE the torch.compile mode).
peer() {
  local fw=$1 mode=$2 precision=$3 batch=$4 log name accuracy=""
  shift 4
  [[ " $* " == *" --epochs "* ]] && accuracy=_accuracy
  name="$fw${mode:+ $mode} cnn $precision, batch $batch${accuracy:+ ($*)}"
  if ! LD_LIBRARY_PATH=${LOCKSTEP_SYSTEM_LD_LIBRARY_PATH-${LD_LIBRARY_PATH-}} \
       timeout 120 python3 -c "import $fw" >/dev/null 2>&1; then
    record "$name" absent "python3 cannot import $fw"
    return
  fi
  log="$logs/${fw}${mode:+_$mode}_${precision}_$batch$accuracy.log"
  LD_LIBRARY_PATH=${LOCKSTEP_SYSTEM_LD_LIBRARY_PATH-${LD_LIBRARY_PATH-}} LOCKSTEP_REFERENCE_COMPILE=$mode \
    PYTHONUNBUFFERED=1 step "$step_timeout" "$log" python3 "$root/scripts/reference/cnn_$fw.py" \
    --data "$train_data_or_synthetic" --global-batch "$batch" --precision "$precision" "$@"
  gpu_step "$name" $? "$log" "$(figures "$log") $(grep -aoE '^test_accuracy=[0-9.]+' "$log")"
  cat "$log"
}

# The long pass in parts, run in the order LOCKSTEP_GPU_PARTS names them (default: all, in this
# order):
#   multi-rank  NCCL with peers: 2 and 3 ranks on the GPU(s), each rank its own NCCL_HOSTID, so
#               that NCCL treats them as separate hosts and connects them over its network
#               transport (sockets on loopback): nccl_hosts_gpu_mpi_test at 2 and 3 ranks, the
#               end-to-end faults (nccl_hosts_gpu_test.sh), and lockstep-bench collectives at 2
#               ranks (a correctness run: two ranks time-slicing one GPU, not a bandwidth figure)
#   bf16        Lockstep's CNN in bf16 at batch 128 and 1024
#   file-reads  Lockstep's CNN, fp32 and bf16 at both batches, its rows read from the file each
#               batch (--data-in-memory-mb 0) rather than from the split held in memory
#   im2col      Lockstep's CNN, fp32 and bf16 at both batches, its convolutions as im2col +
#               cuBLAS (LOCKSTEP_CUDA_CONV=im2col) rather than cuDNN
#   no-graphs   Lockstep's CNN, fp32 and bf16 at both batches, each step launched kernel by
#               kernel (--cuda-graphs off) rather than replayed from a CUDA graph
#   cudnn-any   Lockstep's CNN, fp32 and bf16 at both batches, cuDNN's fastest algorithms whether
#               deterministic or not (LOCKSTEP_CUDNN_DETERMINISTIC=0)
#   conv-pool   Lockstep's CNN, fp32 and bf16 at both batches, the first convolution, max-pool and
#               ReLU as one pair of kernels (LOCKSTEP_CUDA_CONV_POOL=fused), each run beside the
#               unfused layers' at the same batch and precision
#   peers-fp32  PyTorch eager, torch.compile (default and reduce-overhead) and JAX jit, same model
#               and batches, fp32 (TF32 off); LOCKSTEP_GPU_PEERS picks some of
#               "torch:eager torch:default torch:reduce-overhead jax" (the default all)
#   peers-bf16  the same in bf16
#   gpt         GPT-2 small's shape (gpt:small), bf16 and fp32, on random bytes, Lockstep and
#               PyTorch (torch.compile; LOCKSTEP_GPU_GPT_PEERS: its precisions, default bf16 fp32 tf32),
#               at each global batch in LOCKSTEP_GPU_GPT_BATCHES (default 8; beyond 8, bf16 only),
#               and Lockstep bf16 with each --recompute in LOCKSTEP_GPU_GPT_RECOMPUTE (default
#               blocks; empty: none) for its tokens/s and peak device memory; the bf16 run again
#               with cuDNN's fused attention (LOCKSTEP_CUDA_ATTENTION=cudnn) and with the GELU in
#               cuBLASLt's epilogue (LOCKSTEP_CUDA_GELU=epilogue): the bf16 runs take each variant
#               LOCKSTEP_GPU_GPT_ATTENTION names, an attention with +gelu for the epilogue
#               (default "flash cudnn flash+gelu cudnn+gelu")
#   gpt-kernels where gpt:small's bf16 step goes by kind of kernel: Nsight Compute's time of each
#               kernel of one step (ncu, where the machine has it), summed by kind by
#               scripts/ncu-summary.py, once per variant LOCKSTEP_GPU_KERNELS_VARIANTS names (as
#               LOCKSTEP_GPU_GPT_ATTENTION's; default "flash cudnn+gelu")
#   gemm        gpt:small's matrix products one at a time at batch 8 (lockstep-bench gemm): bf16
#               through cuBLAS with C in fp32 and in bf16 and through each of cuBLASLt's algorithms
#               for the product without an epilogue (its heuristic's first against the fastest),
#               and fp32; GPT-2 124M's shape (vocabulary 50,304) in bf16
#   llmc        GPT-2 124M's own shape (vocabulary 50,304), bf16: Lockstep, llm.c built here from
#               the sources gpu-pack.sh --with-llmc carried, and PyTorch, on random token ids
#               (LOCKSTEP_GPU_LLMC_PEERS: which of "llmc torch" run beside Lockstep, default both);
#               Lockstep once per variant LOCKSTEP_GPU_LLMC_VARIANTS names (as part gpt's, +logits
#               for the tied head's logits in bf16; default "flash cudnn+gelu cudnn+gelu+logits")
#   generate    lockstep-generate through the key/value cache on the GPU: gpt:small trained 30 steps
#               (bf16) on this repository's Markdown as bytes, then 512 greedy bytes on the GPU
#               (bytes/s) and 64 on the CPU from the same checkpoint, whose first 64 must agree
#   gpt-loss    lockstep-train's loss step by step against PyTorch's on the same bytes, fp32 (TF32
#               off on both sides) and bf16 (PyTorch under autocast): gpt:small from the same initial
#               parameters (tests/gpt_reference_dump), 20 AdamW steps on one global batch of 8 x
#               1,024 random bytes; scripts/reference/gpt_loss_torch.py prints the largest relative
#               difference (within 1e-4 in fp32, 2e-2 in bf16 to pass)
#   accuracy    Lockstep and PyTorch, fp32 and bf16, LOCKSTEP_GPU_EPOCHS epochs at batch 128
long_pass() {
  local part
  local all="multi-rank bf16 im2col no-graphs cudnn-any conv-pool file-reads peers-fp32 peers-bf16 gpt gpt-kernels gemm llmc generate gpt-loss accuracy"
  for part in ${LOCKSTEP_GPU_PARTS:-$all}; do
    if [[ " $all " == *" $part "* ]]; then "long_${part/-/_}"; else record "part $part" failed "unknown part ($all)"; fi
  done
}
long_multi_rank() {
  local np log t="$build/tests/nccl_hosts_gpu_mpi_test" rc figures_nccl wrong
  # Each rank its own NCCL host; NCCL over sockets on loopback; NCCL_DEBUG=VERSION prints the
  # NCCL version that the programs loaded.
  local hosts=(sh -c 'NCCL_HOSTID=lockstep-check-$OMPI_COMM_WORLD_RANK exec "$0" "$@"')
  local nccl_env=(-x NCCL_IB_DISABLE=1 -x NCCL_SOCKET_IFNAME=lo -x NCCL_DEBUG=VERSION)
  for np in 2 3; do
    run_gtest "nccl_hosts_gpu_mpi_test -n $np" "$logs/nccl_hosts_gpu_mpi_test_np$np.log" \
      "$mpiexec" -n "$np" --oversubscribe "${nccl_env[@]}" "${hosts[@]}" "$t" --gtest_color=no
    cat "$logs/nccl_hosts_gpu_mpi_test_np$np.log"
  done
  e2e_script "$root/tests/nccl_hosts_gpu_test.sh"
  log="$logs/bench_nccl_2ranks.log"
  step "$step_timeout" "$log" "$mpiexec" -n 2 --oversubscribe "${nccl_env[@]}" \
    -x LOCKSTEP_TEST_ONLY_NCCL_SHARES_GPU=1 "${hosts[@]}" "$bench" collectives --backend nccl \
    -b 8 -e 64M -f 8 -w 3 -n 10
  rc=$?
  if [[ $rc -eq 0 ]]; then
    wrong=$(grep -aoE '^# wrong values: [0-9]+' "$log" | grep -oE '[0-9]+$')
    [[ "${wrong:-1}" == 0 ]] || { rc=1; echo "wrong values: ${wrong:-?}" >>"$log"; }
  fi
  figures_nccl=$(grep -aoE 'NCCL version [^ ]+' "$log" | head -1)
  gpu_step "bench collectives nccl (2 ranks, NET over lo)" "$rc" "$log" "${figures_nccl:-} wrong ${wrong:-?}"
  cat "$log"
}
long_bf16() {
  local batch
  for batch in 128 1024; do bench_train "$batch" bf16; done
}
long_im2col() {
  local batch precision
  for precision in fp32 bf16; do
    for batch in 128 1024; do LOCKSTEP_CUDA_CONV=im2col bench_train "$batch" "$precision"; done
  done
}
long_no_graphs() {
  local batch precision
  for precision in fp32 bf16; do
    for batch in 128 1024; do bench_train "$batch" "$precision" --cuda-graphs off; done
  done
}
long_conv_pool() {
  local batch precision
  for precision in fp32 bf16; do
    for batch in 128 1024; do
      LOCKSTEP_CUDA_CONV_POOL=unfused bench_train "$batch" "$precision"
      LOCKSTEP_CUDA_CONV_POOL=fused bench_train "$batch" "$precision"
    done
  done
}
long_cudnn_any() {
  local batch precision
  for precision in fp32 bf16; do
    for batch in 128 1024; do LOCKSTEP_CUDNN_DETERMINISTIC=0 bench_train "$batch" "$precision"; done
  done
}
long_file_reads() {
  local batch precision
  for precision in fp32 bf16; do
    for batch in 128 1024; do bench_train "$batch" "$precision" --data-in-memory-mb 0; done
  done
}
long_peers() {
  local batch p
  for batch in 128 1024; do
    for p in ${LOCKSTEP_GPU_PEERS:-torch:eager torch:default torch:reduce-overhead jax}; do
      case $p in
        torch:*) peer torch "${p#torch:}" "$1" "$batch" --steps 200 --warmup 20 ;;
        jax) peer jax "" "$1" "$batch" --steps 200 --warmup 20 ;;
        *) record "peer $p" failed "unknown peer (torch:eager torch:default torch:reduce-overhead jax)" ;;
      esac
    done
  done
}
# The GPT runs' variants: those LOCKSTEP_GPU_GPT_ATTENTION names, each an attention
# (LOCKSTEP_CUDA_ATTENTION) with +gelu for the GELU in cuBLASLt's epilogue (LOCKSTEP_CUDA_GELU)
# and +logits for the tied head's logits in bf16 (LOCKSTEP_CUDA_LOGITS), e.g. cudnn+gelu+logits;
# the environment a variant runs with, what it adds to its log's name and its label; whether cuDNN
# or cuBLASLt refused (the flash kernels, or a GELU pass, then ran).
gpt_variants() { echo "${LOCKSTEP_GPU_GPT_ATTENTION-flash cudnn flash+gelu cudnn+gelu}"; }
variant_env() {
  local gelu=kernel logits=fp32
  [[ $1 == *+gelu* ]] && gelu=epilogue
  [[ $1 == *+logits* ]] && logits=bf16
  echo "LOCKSTEP_CUDA_ATTENTION=${1%%+*} LOCKSTEP_CUDA_GELU=$gelu LOCKSTEP_CUDA_LOGITS=$logits"
}
variant_suffix() {
  local s=""
  [[ ${1%%+*} == cudnn ]] && s=_cudnn
  [[ $1 == *+gelu* ]] && s+=_gelu_epilogue
  [[ $1 == *+logits* ]] && s+=_logits16
  echo "$s"
}
variant_label() {
  local s=""
  [[ ${1%%+*} == cudnn ]] && s=" cuDNN attention"
  [[ $1 == *+gelu* ]] && s+=" GELU epilogue"
  [[ $1 == *+logits* ]] && s+=" bf16 logits"
  echo "$s"
}
refusals() {
  grep -aoE "cuDNN's attention is not usable|GELU epilogue does not take|GELU-derivative epilogue does not take" "$1" || true
}

long_peers_fp32() { long_peers fp32; }
long_peers_bf16() { long_peers bf16; }
# GPT-2 small's shape (issue 20) on random bytes, 8 sequences of 1024 tokens a step, AdamW with
# clipping as GPT training runs: tokens/s and achieved FLOP/s against the GEMM peak measured in
# the same run; beside it PyTorch on the same model (scripts/reference/gpt_bench_torch.py:
# torch.compile, flash SDPA, bf16 autocast, fused AdamW) in the precisions LOCKSTEP_GPU_GPT_PEERS
# names (default "bf16 fp32 tf32"; tf32 is PyTorch with TF32 on, labelled so).
long_gpt() {
  local precision log batch recompute variant run rc
  for batch in ${LOCKSTEP_GPU_GPT_BATCHES:-8}; do
    for run in $(printf 'bf16:%s ' $(gpt_variants)) fp32:flash; do
      precision=${run%:*} variant=${run#*:}
      [[ $precision == fp32 && $batch != 8 ]] && continue
      log="$logs/bench_gpt_small_${precision}_b$batch$(variant_suffix "$variant").log"
      step "$step_timeout" "$log" env $(variant_env "$variant") "$bench" train --device cuda \
        --precision "$precision" --model gpt:small --global-batch "$batch" --optimizer adamw \
        --weight-decay 0.1 --clip-norm 1 --steps 30 --warmup 5
      rc=$?  # before the label's command substitution resets $?
      gpu_step "lockstep gpt:small $precision$(variant_label "$variant"), batch $batch x 1024" \
        $rc "$log" "$(grep -aoE '^tokens_per_second=[0-9.]+' "$log") \
$(grep -aoE '^peak_share=[0-9.]+%' "$log") $(grep -aoE '^peak_device_memory_mb=[0-9]+' "$log") \
$(refusals "$log")"
      cat "$log"
    done
    for recompute in ${LOCKSTEP_GPU_GPT_RECOMPUTE-blocks}; do
      log="$logs/bench_gpt_small_bf16_b${batch}_recompute_$recompute.log"
      step "$step_timeout" "$log" "$bench" train --device cuda --precision bf16 \
        --model gpt:small --global-batch "$batch" --optimizer adamw --weight-decay 0.1 --clip-norm 1 \
        --steps 20 --warmup 5 --recompute "$recompute"
      gpu_step "lockstep gpt:small bf16 --recompute $recompute, batch $batch x 1024" $? "$log" \
        "$(grep -aoE '^tokens_per_second=[0-9.]+' "$log") $(grep -aoE '^peak_device_memory_mb=[0-9]+' "$log")"
      cat "$log"
    done
    for precision in ${LOCKSTEP_GPU_GPT_PEERS-bf16 fp32 tf32}; do
      [[ $precision != bf16 && $batch != 8 ]] && continue
      if ! LD_LIBRARY_PATH=${LOCKSTEP_SYSTEM_LD_LIBRARY_PATH-${LD_LIBRARY_PATH-}} \
           timeout 120 python3 -c "import torch" >/dev/null 2>&1; then
        record "torch gpt:small $precision" absent "python3 cannot import torch"
        continue
      fi
      log="$logs/torch_gpt_small_${precision}_b$batch.log"
      LD_LIBRARY_PATH=${LOCKSTEP_SYSTEM_LD_LIBRARY_PATH-${LD_LIBRARY_PATH-}} PYTHONUNBUFFERED=1 \
        step "$step_timeout" "$log" python3 "$root/scripts/reference/gpt_bench_torch.py" \
        --model gpt:small --global-batch "$batch" --precision "$precision" --steps 30 --warmup 5
      gpu_step "torch.compile gpt:small $precision, batch $batch x 1024" $? "$log" \
        "$(grep -aoE 'tokens_per_second=[0-9.]+' "$log") $(grep -aoE 'peak_memory_mb=[0-9]+' "$log") $(grep -aoE 'torch=[^ ]+' "$log")"
      cat "$log"
    done
  done
}
# Where gpt:small's bf16 step goes by kind of kernel: ncu times each kernel of one step alone
# (an eager step: the kernels a captured one replays), the peak's product cut to 64^3, and
# scripts/ncu-summary.py sums them by kind (from ncu's log file, or, where that version printed its
# table among the program's output, from the step's log).
long_gpt_kernels() {
  local ncu variant log csv rc
  ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null |
    head -1)
  if [[ -z $ncu ]]; then
    record "ncu gpt:small kernels" absent "no ncu (Nsight Compute) on PATH or under /usr/local/cuda"
    return
  fi
  for variant in ${LOCKSTEP_GPU_KERNELS_VARIANTS:-flash cudnn+gelu}; do
    log="$logs/ncu_gpt_small_bf16$(variant_suffix "$variant").log"
    csv="$logs/ncu_gpt_small_bf16$(variant_suffix "$variant").csv"
    step "$step_timeout" "$log" env $(variant_env "$variant") "$ncu" \
      --metrics gpu__time_duration.sum --csv --print-units base --log-file "$csv" \
      "$bench" train --device cuda --precision bf16 --model gpt:small --global-batch 8 \
      --optimizer adamw --weight-decay 0.1 --clip-norm 1 --steps 1 --warmup 0 --peak-size 64
    rc=$?
    { LD_LIBRARY_PATH=${LOCKSTEP_SYSTEM_LD_LIBRARY_PATH-${LD_LIBRARY_PATH-}} \
        python3 "$root/scripts/ncu-summary.py" "$csv" 2>/dev/null ||
        LD_LIBRARY_PATH=${LOCKSTEP_SYSTEM_LD_LIBRARY_PATH-${LD_LIBRARY_PATH-}} \
          python3 "$root/scripts/ncu-summary.py" "$log"; } >"$log.summary" 2>&1 || rc=1
    cat "$log.summary" >>"$log"
    gpu_step "ncu gpt:small bf16$(variant_label "$variant"), one step's kernels" $rc "$log" \
      "$(grep -m1 'kernel launches' "$log.summary")"
    cat "$log"
  done
}
# gpt:small's products one at a time (lockstep-bench gemm): where the step's GEMM time goes, shape
# by shape, against the peak measured in the same run, and whether cuBLASLt's heuristic picks the
# fastest of its algorithms.
long_gemm() {
  local run model precision log rc
  for run in gpt:small/bf16 gpt:small/fp32 gpt:small,vocab=50304/bf16; do
    model=${run%/*} precision=${run#*/}
    log="$logs/gemm_${model//[:,=]/_}_$precision.log"
    step "$step_timeout" "$log" "$bench" gemm --device cuda --precision "$precision" \
      --model "$model" --global-batch 8
    rc=$?
    gpu_step "gemm $model $precision, batch 8 x 1024" $rc "$log" \
      "$(grep -aoE '^gemm_ms_(per_step|at_peak)=[0-9.]+( share_of_peak=[0-9.]+%)?' "$log" | tr '\n' ' ')"
    cat "$log"
  done
}
# The libcudnn.so.9 this process's programs load (env.sh put its folder on LD_LIBRARY_PATH), else
# the loader cache's; empty where there is none.
llmc_libcudnn() {
  local d
  local IFS=:
  for d in ${LD_LIBRARY_PATH-}; do
    [[ -n $d && -e $d/libcudnn.so.9 ]] && { echo "$d/libcudnn.so.9"; return; }
  done
  ldconfig -p 2>/dev/null | awk '$1 == "libcudnn.so.9" { print $NF; exit }'
}
# GPT-2 124M's own shape (vocabulary 50,304) in bf16, 8 x 1,024 tokens a step, AdamW, random token
# ids: Lockstep (gpt:small,vocab=50304), llm.c's train_gpt2cu built here from the sources
# gpu-pack.sh --with-llmc carried (no MPI or NCCL: their headers are not in the image; cuDNN's
# flash attention where the pack carried cuDNN's and its frontend's headers, as below; its
# one call that CUDA 13 changed, cudaMemAdvise's location, patched; linked against the driver's
# NVML), its -e d12 random initialisation on a token file in its format
# (scripts/reference/llmc_tokens.py), and PyTorch on the same shape. llm.c's step time is the
# median of its printed per-step milliseconds after 5 steps. Lockstep runs once per variant in
# LOCKSTEP_GPU_LLMC_VARIANTS (default "flash cudnn+gelu cudnn+gelu+logits": the step as it was,
# with cuDNN's attention and the GELU epilogue, and with bf16 logits too, which matter at this
# vocabulary; part gpt compares the other variants).
long_llmc() {
  local tar="$root/.device/llmc.tar.xz" dir log rc cc nvml ms attention cudnn cudnn_inc ldflags
  local -a make
  local lockstep_model="gpt:small,vocab=50304" variant
  for variant in ${LOCKSTEP_GPU_LLMC_VARIANTS-flash cudnn+gelu cudnn+gelu+logits}; do
    log="$logs/bench_gpt2_124m_bf16$(variant_suffix "$variant").log"
    step "$step_timeout" "$log" env $(variant_env "$variant") "$bench" train --device cuda \
      --precision bf16 --model "$lockstep_model" --global-batch 8 --optimizer adamw \
      --weight-decay 0.1 --clip-norm 1 --steps 30 --warmup 5
    rc=$?
    gpu_step "lockstep $lockstep_model bf16$(variant_label "$variant"), batch 8 x 1024" $rc "$log" \
      "$(grep -aoE '^tokens_per_second=[0-9.]+' "$log") \
$(grep -aoE '^step_ms_median=[0-9.]+' "$log") $(refusals "$log")"
    cat "$log"
  done
  if [[ " ${LOCKSTEP_GPU_LLMC_PEERS-llmc torch} " != *" llmc "* ]]; then
    :
  elif [[ ! -f $tar ]]; then
    record "llm.c" absent "no $tar (scripts/gpu-pack.sh --with-llmc SRC)"
  else
    dir=$(mktemp -d "${TMPDIR:-/tmp}/llmc-XXXXXX")
    tar -xJf "$tar" -C "$dir"
    sed -i 's/cudaMemAdvise(\*out, bytes, cudaMemAdviseSetPreferredLocation, cudaCpuDeviceId)/cudaMemAdvise(*out, bytes, cudaMemAdviseSetPreferredLocation, cudaMemLocation{cudaMemLocationTypeHost, 0})/' \
      "$dir/llmc/cuda_utils.cuh"
    mkdir -p "$dir/nvml"
    nvml=$(ldconfig -p 2>/dev/null | awk '/libnvidia-ml\.so\.1 /{print $NF; exit}')
    [[ -n $nvml ]] && ln -sf "$nvml" "$dir/nvml/libnvidia-ml.so"
    cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '. ')
    # With cuDNN's flash attention (USE_CUDNN=1), as llm.c's record runs, where the pack carried
    # the headers and this machine has a libcudnn.so.9 (the one the pack's programs load); else,
    # or where that build fails, without, and the label says which ran.
    attention="no cuDNN"
    cudnn=$(llmc_libcudnn)
    log="$logs/llmc_build.log"
    make=(make -C "$dir" -j 16 train_gpt2cu NO_MULTI_GPU=1 NO_USE_MPI=1
          GPU_COMPUTE_CAPABILITY="${cc:-90}")
    ldflags="-lcublas -lcublasLt -L$dir/nvml -lnvidia-ml"
    if [[ -f $dir/cudnn-frontend/include/cudnn_frontend.h && -n $cudnn ]]; then
      mkdir -p "$dir/cudnn/lib"
      ln -sf "$cudnn" "$dir/cudnn/lib/libcudnn.so"
      # cuDNN's headers of the library itself where they lie beside it (a wheel's include/), else
      # the ones the pack carried (the CPU machine's cuDNN 9).
      cudnn_inc=$dir/cudnn/include
      [[ -f ${cudnn%/lib/*}/include/cudnn.h ]] && cudnn_inc=${cudnn%/lib/*}/include
      # Command-line variables replace the Makefile's own additions: -lcudnn and the headers'
      # folders go in here (CUDNN_FRONTEND_PATH reaches nvcc as -I$(CUDNN_FRONTEND_PATH)), and
      # -lnvrtc, which cuDNN frontend 1.32's experimental engines call (the link fails without:
      # tried on the CPU machine, 2026-11-29, with CUDA 13.0 and cuDNN 9.19's headers).
      PATH="$PATH:${CUDA_HOME:-/usr/local/cuda}/bin" step $((3 * step_timeout)) "$log" \
        "${make[@]}" USE_CUDNN=1 CUDNN_FRONTEND_PATH="$dir/cudnn-frontend/include -I$cudnn_inc" \
        NVCC_LDFLAGS="$ldflags -L$dir/cudnn/lib -lcudnn -lnvrtc -Xlinker -rpath=${cudnn%/*}"
      rc=$?
      if [[ $rc -eq 0 ]]; then attention="cuDNN attention ($cudnn)"; else
        attention="no cuDNN: its build failed, $log.cudnn"
        mv "$log" "$log.cudnn"
        make -C "$dir" clean >/dev/null 2>&1 || true
      fi
    elif [[ -z $cudnn ]]; then
      attention="no cuDNN: no libcudnn.so.9 on this machine"
    else
      attention="no cuDNN: the pack carried no cuDNN headers"
    fi
    if [[ $attention == no* ]]; then
      PATH="$PATH:${CUDA_HOME:-/usr/local/cuda}/bin" step $((3 * step_timeout)) "$log" \
        "${make[@]}" NVCC_LDFLAGS="$ldflags"
      rc=$?
    fi
    gpu_step "llm.c build (train_gpt2cu, sm_${cc:-90}, $attention)" "$rc" "$log" ""
    if [[ $rc -eq 0 ]]; then
      python3 "$root/scripts/reference/llmc_tokens.py" "$dir/train.bin" --tokens $((8 * 1024 * 40 + 1)) &&
        python3 "$root/scripts/reference/llmc_tokens.py" "$dir/val.bin" --tokens $((8 * 1024 * 2 + 1)) --seed 1
      log="$logs/llmc_gpt2_124m_bf16.log"
      (cd "$dir" && step "$step_timeout" "$log" ./train_gpt2cu -i train.bin -j val.bin -e d12 -b 8 \
         -t 1024 -d 8192 -x 30 -v 1000 -s 0 -l 6e-4 -c 0.1)
      rc=$?
      ms=$(grep -aoE '^step +[0-9]+/[0-9]+ .*\| +[0-9.]+ ms' "$log" | awk '{ split($2, s, "/"); if (s[1] > 5) print $(NF - 1) }' |
           sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }')
      gpu_step "llm.c train_gpt2cu d12 bf16 ($attention), batch 8 x 1024" "$rc" "$log" \
        "${ms:+step_ms_median=$ms tokens_per_second=$(awk -v m="$ms" 'BEGIN { printf "%.0f", 8192 / m * 1000 }')}"
      tail -12 "$log"
    fi
  fi
  [[ " ${LOCKSTEP_GPU_LLMC_PEERS-llmc torch} " == *" torch "* ]] || return 0
  log="$logs/torch_gpt2_124m_bf16.log"
  LD_LIBRARY_PATH=${LOCKSTEP_SYSTEM_LD_LIBRARY_PATH-${LD_LIBRARY_PATH-}} PYTHONUNBUFFERED=1 \
    step "$step_timeout" "$log" python3 "$root/scripts/reference/gpt_bench_torch.py" \
    --model "$lockstep_model" --global-batch 8 --precision bf16 --steps 30 --warmup 5
  gpu_step "torch.compile $lockstep_model bf16, batch 8 x 1024" $? "$log" \
    "$(grep -aoE 'tokens_per_second=[0-9.]+' "$log") $(grep -aoE 'torch=[^ ]+' "$log")"
  cat "$log"
}
# Accuracy on the real data in fp32 and bf16, Lockstep and PyTorch with the same settings.
long_generate() {
  # The corpus and checkpoints (1.4 GB) in the work folder, not the logs.
  local dir="$work/generate" log rc gpu_text cpu_text
  mkdir -p "$dir"
  log="$logs/generate_prepare.log"
  step "$step_timeout" "$log" bash -c '"$1/apps/lockstep-data" text --in "$2"/README.md "$2"/docs/*.md \
      --out "$3/text.h5" --seq-len 1024 &&
    "$1/apps/lockstep-train" --data "$3/text.h5" --model gpt:small --device cuda --precision bf16 \
      --global-batch 8 --steps 30 --checkpoint-dir "$3/ck" --progress none' _ "$build" "$root" "$dir"
  rc=$?
  gpu_step "generate: gpt:small trained 30 steps" $rc "$log" "$(ls "$dir/ck" 2>/dev/null | tail -1)"
  cat "$log"
  [[ $rc -eq 0 ]] || return 0
  local ck
  ck=$(ls "$dir"/ck/ckpt-*.h5 | tail -1)
  log="$logs/generate_gpu.log"
  step "$step_timeout" "$log" bash -c '"$1/apps/lockstep-generate" --checkpoint "$2" --prompt "The " \
    --tokens 512 --temperature 0 --device cuda >"$3/gpu.txt"' _ "$build" "$ck" "$dir"
  rc=$?
  gpu_step "generate: gpt:small on the GPU, 512 greedy bytes" $rc "$log" \
    "$(grep -aoE '[0-9.]+ bytes/s on cuda' "$log")"
  cat "$log"
  log="$logs/generate_cpu.log"
  step "$step_timeout" "$log" bash -c '"$1/apps/lockstep-generate" --checkpoint "$2" --prompt "The " \
    --tokens 64 --temperature 0 --device cpu >"$3/cpu.txt"' _ "$build" "$ck" "$dir"
  rc=$?
  cp "$dir/gpu.txt" "$logs/generate_gpu.txt" 2>/dev/null
  gpu_text=$(head -c 64 "$dir/gpu.txt" 2>/dev/null | od -An -v -tx1 | tr -d ' \n')
  cpu_text=$(head -c 64 "$dir/cpu.txt" 2>/dev/null | od -An -v -tx1 | tr -d ' \n')
  if [[ $rc -ne 0 ]]; then
    record "generate: the same 64 bytes on the CPU" failed "$(first_error "$log")"
  elif [[ -n $gpu_text && $gpu_text == "$cpu_text" ]]; then
    record "generate: the same 64 bytes on the CPU" ok "$(grep -aoE '[0-9.]+ bytes/s on cpu' "$log")"
  else
    record "generate: the same 64 bytes on the CPU" failed "GPU $gpu_text, CPU $cpu_text"
  fi
}
long_gpt_loss() {
  local dir="$work/gpt-loss" log rc precision spec=gpt:small seed=11
  local hyper=(--lr 1e-3 --warmup 2 --min-lr 1e-4 --schedule cosine --weight-decay 0.1 --beta2 0.95
               --clip-norm 1)
  mkdir -p "$dir"
  log="$logs/gpt_loss_prepare.log"
  step "$step_timeout" "$log" bash -c '"$1/tests/gpt_reference_dump" "$2/init.h5" --spec "$3" \
      --seed "$4" --steps 0 --batch 1 --seq 32 &&
    "$1/apps/lockstep-data" synthetic --kind tokens --samples 8 --test-samples 1 --seq-len 1024 \
      -o "$2/rows.h5"' _ "$build" "$dir" "$spec" "$seed"
  rc=$?
  gpu_step "gpt-loss: initial parameters, 8 rows" $rc "$log" ""
  [[ $rc -eq 0 ]] || return 0
  for precision in fp32 bf16; do
    log="$logs/gpt_loss_train_$precision.log"
    step "$step_timeout" "$log" "$build/apps/lockstep-train" --device cuda --precision "$precision" \
      --model "$spec" --data "$dir/rows.h5" --global-batch 8 --steps 20 --seed "$seed" \
      --optimizer adamw --lr 1e-3 --weight-decay 0.1 --clip-norm 1 --lr-schedule cosine \
      --warmup-steps 2 --min-lr 1e-4 --beta2 0.95 --log-every 1 --progress none \
      --metrics "$dir/$precision.jsonl"
    rc=$?
    gpu_step "gpt-loss: Lockstep $precision, 20 steps" $rc "$log" ""
    [[ $rc -eq 0 ]] || continue
    log="$logs/gpt_loss_torch_$precision.log"
    LD_LIBRARY_PATH=${LOCKSTEP_SYSTEM_LD_LIBRARY_PATH-${LD_LIBRARY_PATH-}} PYTHONUNBUFFERED=1 \
      step "$step_timeout" "$log" python3 "$root/scripts/reference/gpt_loss_torch.py" \
      --device cuda --precision "$precision" --init "$dir/init.h5" --data "$dir/rows.h5" \
      --metrics "$dir/$precision.jsonl" "${hyper[@]}"
    rc=$?
    gpu_step "gpt-loss: $precision against PyTorch" $rc "$log" \
      "$(grep -aE '^(loss after|max relative)' "$log" | tr '\n' ' ')"
    cat "$log"
  done
}
long_accuracy() {
  local train="$build/apps/lockstep-train" precision log
  if [[ ! -f "$train_data" || $accuracy_epochs -le 0 ]]; then
    record "accuracy" absent "needs $train_data (gpu-pack.sh, or lockstep-data fashion-mnist) and LOCKSTEP_GPU_EPOCHS > 0"
    return
  fi
  for precision in fp32 bf16; do
    log="$logs/train_$precision.log"
    step "$step_timeout" "$log" "$train" --device cuda --precision "$precision" --data "$train_data" \
      --model cnn --global-batch 128 --epochs "$accuracy_epochs" --progress lines
    gpu_step "lockstep-train cnn $precision, $accuracy_epochs epochs" $? "$log" \
      "$(grep -aoE '^test_accuracy=[0-9.]+' "$log") $(grep -aoE '^test_loss=[0-9.]+' "$log")"
    tail -5 "$log"
    peer torch default "$precision" 128 --steps 10 --warmup 2 --epochs "$accuracy_epochs"
  done
}

if [[ $failed -eq 0 && ! -x "$bench" ]]; then
  record "benchmarks" failed "missing $bench"
elif [[ $failed -eq 0 ]]; then
  "${pass}_pass"
fi

echo
echo "== gpu-check summary ($pass pass; $summary, logs beside it)"
cat "$summary"
if [[ $failed -ne 0 ]]; then
  echo "== gpu-check: exit 1: a step failed"
  exit 1
elif [[ $gpu_present -eq 0 ]]; then
  echo "== gpu-check: exit 3: no GPU listed by nvidia-smi; nothing was measured"
  exit 3
fi
echo "== gpu-check: exit 0: every step passed"
