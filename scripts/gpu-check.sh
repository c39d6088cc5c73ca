#!/usr/bin/env bash
# The GPU check, one command on a machine with an NVIDIA GPU: builds the CUDA build (or uses the
# build folder given), runs the GPU tests (label gpu), the collectives on device buffers with 2 MPI
# ranks sharing GPU 0, the NCCL collective benchmark, the CNN training benchmark on CUDA at global
# batch 128 and 1024, and the same model and batches in PyTorch and JAX (scripts/reference) where
# python3 has them; then prints one table. Exits non-zero when a step fails (a skip is no failure).
#   bash scripts/gpu-check.sh [BUILD_DIR]       default: $LOCKSTEP_BUILD_DIR, else build-gpu/
#   LOCKSTEP_GPU_BENCH_ARGS='-b 8 -e 1G -f 4'   sizes for the collective benchmark
#   LOCKSTEP_GPU_DATA=data/fashion-mnist.h5     training data (default; random data when absent)
#   LOCKSTEP_GPU_EPOCHS=5                       epochs of the fp32 and bf16 accuracy runs (0: none)
# A build folder that already holds the test binaries (e.g. carried to the GPU machine) is used as
# it is; otherwise it is configured with LOCKSTEP_CUDA=ON and built. Run-time libraries carried in
# .device/ (MPI, HDF5, ...) are found by sourcing .device/env.sh first, when it exists.
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(realpath -m "${1:-${LOCKSTEP_BUILD_DIR:-$root/build-gpu}}")
cd "$root" || exit 1
# Sourced before `set -u`: such files often extend variables that may be unset (LD_LIBRARY_PATH).
# shellcheck source=/dev/null
[[ -f .device/env.sh ]] && . .device/env.sh
set -uo pipefail
bench_sizes=${LOCKSTEP_GPU_BENCH_ARGS:--b 8 -e 1G -f 4}
here="$root/scripts"
train_data=${LOCKSTEP_GPU_DATA:-data/fashion-mnist.h5}
train_data_or_synthetic=$train_data
accuracy_epochs=${LOCKSTEP_GPU_EPOCHS:-5}
[[ -f "$train_data" ]] || train_data_or_synthetic=synthetic
mpiexec=${MPIEXEC:-mpiexec}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_hwloc_base_binding_policy=none
logs=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check-XXXXXX")

rows=()
failed=0
# record STEP RESULT DETAIL: one row of the final table; RESULT "failed" makes the exit non-zero.
record() {
  rows+=("$1"$'\t'"$2"$'\t'"$3")
  [[ "$2" == failed ]] && failed=1
  printf '== %s: %s %s\n' "$1" "$2" "$3"
}

# The throughput figures of a lockstep-bench train or scripts/reference output, on one line.
figures() {
  grep -aoE '^(samples_per_second|step_ms_median|achieved_gflops)=[0-9.]+' "$1" | tr '\n' ' '
}

# The first line of LOG that reports an error, else its last line.
first_error() {
  grep -m1 -aE 'error' "$1" || tail -1 "$1"
}

# run_gtest NAME LOG CMD...: runs a GoogleTest binary (directly or through mpiexec) and records
# passed / skipped (exit 77, or every test skipped) / failed, with the first skip reason or failure.
run_gtest() {
  local name=$1 log=$2
  shift 2
  "$@" >"$log" 2>&1
  local rc=$? detail
  local passed skipped
  passed=$(grep -aoE '\[  PASSED  \] [0-9]+' "$log" | head -1 | grep -oE '[0-9]+$')
  skipped=$(grep -aoE '\[  SKIPPED \] [0-9]+ test' "$log" | head -1 | grep -oE '[0-9]+')
  if [[ $rc -eq 77 ]] || [[ $rc -eq 0 && "${passed:-0}" == 0 && "${skipped:-0}" != 0 ]]; then
    detail=$(grep -aA1 ': Skipped$' "$log" | grep -av ': Skipped$' | grep -av '^--$' | head -1)
    record "$name" skipped "${detail:-see $log}"
  elif [[ $rc -eq 0 ]]; then
    record "$name" passed "${passed:-?} tests${skipped:+, $skipped skipped}"
  else
    detail=$(grep -aE 'Failure|error:|\[  FAILED  \]' "$log" | head -1)
    record "$name" failed "exit $rc: ${detail:-see $log}"
  fi
}

echo "== gpu-check: build $build, logs in $logs"
if command -v nvidia-smi >/dev/null; then
  gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)
else
  gpu="nvidia-smi not found"
fi
record "gpu" info "$gpu"

# ---- build (or reuse) ----
if [[ -x "$build/tests/collectives_gpu_test" ]]; then
  record "build" reused "$build"
else
  if LOCKSTEP_CUDA=ON LOCKSTEP_BUILD_DIR="$build" bash "$root/scripts/build.sh" >"$logs/build.log" 2>&1
  then
    record "build" built "$build (LOCKSTEP_CUDA=ON)"
  else
    record "build" failed "see $logs/build.log: $(grep -m1 -aE 'error' "$logs/build.log")"
  fi
fi

if [[ $failed -eq 0 ]]; then
  # ---- GPU tests: the gtest binaries ctest labels gpu (*_gpu_test), run directly so that a
  # build folder carried from another machine (whose ctest files name other paths) works too ----
  shopt -s nullglob
  gpu_tests=("$build"/tests/*_gpu_test)
  [[ ${#gpu_tests[@]} -eq 0 ]] && record "gpu tests" failed "no *_gpu_test binary in $build/tests"
  for t in "${gpu_tests[@]}"; do
    name=$(basename "$t")
    run_gtest "$name" "$logs/$name.log" "$t" --gtest_color=no
  done

  # ---- 2 ranks sharing GPU 0 through the MPI backend (NCCL refuses two ranks on one GPU) ----
  shared_tests=("$build"/tests/*_gpu_mpi_test)
  [[ -e "${shared_tests[0]}" ]] || record "gpu mpi tests" failed "no *_gpu_mpi_test binary in $build/tests"
  for t in "${shared_tests[@]}"; do
    [[ -e "$t" ]] || continue
    name="$(basename "$t") -n 2"
    run_gtest "$name" "$logs/$(basename "$t")_np2.log" "$mpiexec" -n 2 --oversubscribe "$t" --gtest_color=no
  done

  # ---- end-to-end GPU scripts (tests/*_gpu_test.sh) over the built apps ----
  for script in "$root"/tests/*_gpu_test.sh; do
    [[ -e "$script" ]] || continue
    name=$(basename "$script" .sh)
    LOCKSTEP_BIN="$build/apps" LOCKSTEP_SRC="$root" MPIEXEC="$mpiexec" bash "$script" >"$logs/$name.log" 2>&1
    case $? in
      0) record "$name" passed "" ;;
      77) record "$name" skipped "$(grep -a -m1 'skipped' "$logs/$name.log")" ;;
      *) record "$name" failed "$(grep -a -m1 'FAIL' "$logs/$name.log" || tail -1 "$logs/$name.log")" ;;
    esac
  done

  # ---- benchmarks ----
  bench="$build/apps/lockstep-bench"
  if [[ -x "$bench" ]]; then
    # One rank on one GPU: bus bandwidth is 0 by definition (nccl-tests: factor (n-1)/n), so the
    # table shows the smallest size's latency and the largest size's algorithm bandwidth.
    # shellcheck disable=SC2086  # the sizes are several words on purpose
    if "$bench" collectives --backend nccl $bench_sizes >"$logs/bench_nccl.log" 2>&1; then
      summary=$(awk '/^# [a-z_]+ +busbw =/ { c = $2 }
                     /^ +[0-9]/ && c != "" {
                       if (!(c in lat)) { lat[c] = $7; small[c] = $1; order[++n] = c }
                       bw[c] = $9; large[c] = $1 }
                     END { for (i = 1; i <= n; i++) { c = order[i]
                             printf "%s%s %sus@%sB %sGB/s@%sB", (i > 1 ? "; " : ""), c, lat[c],
                                    small[c], bw[c], large[c] } }' "$logs/bench_nccl.log")
      wrong=$(grep -aoE '^# wrong values: [0-9]+' "$logs/bench_nccl.log" | grep -oE '[0-9]+$')
      if [[ "${wrong:-1}" == 0 ]]; then
        record "bench collectives nccl (1 GPU)" ok "${summary:-see $logs/bench_nccl.log}"
      else
        record "bench collectives nccl (1 GPU)" failed "wrong values: ${wrong:-?} (see log)"
      fi
      cat "$logs/bench_nccl.log"
    else
      record "bench collectives nccl (1 GPU)" failed "$(first_error "$logs/bench_nccl.log")"
    fi
    # Training throughput at the issue's two batch sizes, then the same model and batch in
    # PyTorch and JAX (scripts/reference) where python3 has them, side by side in the table.
    for batch in 128 1024; do
      data_args=()
      [[ -f "$train_data" ]] && data_args=(--data "$train_data")
      for precision in fp32 bf16; do
        log="$logs/bench_train_${batch}_$precision.log"
        if "$bench" train --device cuda --precision "$precision" --model cnn --global-batch "$batch" \
             --steps 200 --warmup 20 "${data_args[@]}" >"$log" 2>&1; then
          record "lockstep cnn $precision, batch $batch" ok "$(figures "$log")"
          cat "$log"
        else
          record "lockstep cnn $precision, batch $batch" failed "$(first_error "$log")"
        fi
      done
      for fw in torch jax; do
        if ! python3 -c "import $fw" >/dev/null 2>&1; then
          record "$fw cnn, batch $batch" absent "python3 cannot import $fw"
          continue
        fi
        log="$logs/${fw}_$batch.log"
        if python3 "$here/reference/cnn_$fw.py" --data "${train_data_or_synthetic}" \
             --global-batch "$batch" --steps 200 --warmup 20 >"$log" 2>&1; then
          record "$fw cnn fp32, batch $batch" ok "$(figures "$log")"
          cat "$log"
        else
          record "$fw cnn fp32, batch $batch" failed "$(tail -1 "$log")"
        fi
      done
    done
    # Accuracy on the real data in fp32 and bf16 (the issue asks for the same within 0.5%).
    train="$build/apps/lockstep-train"
    if [[ -f "$train_data" && -x "$train" && $accuracy_epochs -gt 0 ]]; then
      for precision in fp32 bf16; do
        log="$logs/train_$precision.log"
        if "$train" --device cuda --precision "$precision" --data "$train_data" --model cnn \
             --global-batch 128 --epochs "$accuracy_epochs" --progress lines >"$log" 2>&1; then
          record "lockstep-train cnn $precision, $accuracy_epochs epochs" ok \
            "$(grep -aoE '^test_accuracy=[0-9.]+' "$log") $(grep -aoE '^test_loss=[0-9.]+' "$log")"
        else
          record "lockstep-train cnn $precision, $accuracy_epochs epochs" failed "$(first_error "$log")"
        fi
      done
    else
      record "lockstep-train accuracy" absent "needs $train_data (lockstep-data fashion-mnist) and LOCKSTEP_GPU_EPOCHS > 0"
    fi
  else
    record "benchmarks" failed "missing $bench"
  fi
fi

echo
echo "== gpu-check summary"
printf '%-40s %-8s %s\n' "step" "result" "detail"
for row in "${rows[@]}"; do
  IFS=$'\t' read -r step result detail <<<"$row"
  printf '%-40s %-8s %s\n' "$step" "$result" "${detail:0:300}"
done
exit $failed
