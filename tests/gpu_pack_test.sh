#!/usr/bin/env bash
# The GPU pack, rehearsed as a GPU machine receives it: scripts/gpu-pack.sh packs the CUDA build
# ctest runs in (sizes printed, within 60 MiB), and the pack is used beside a copy of the checkout,
# in a private mount namespace where this machine's Open MPI, PMIx, HDF5, Boost, OpenBLAS, the
# other libraries the pack carries, and mpiexec are hidden under empty mounts. There:
#  - env.sh names the CUDA runtime, cuBLAS and NCCL it chose;
#  - ldd resolves every library of every packed program, library and MPI component into the pack
#    (glibc, the C++ runtime and CUDA excepted: the GPU machine's image has those);
#  - an MPI singleton (lockstep-data) and `orterun -n 2` (lockstep-train on the CPU) run;
#  - gpu-check.sh runs to its end and exits 3 (no GPU): each GPU test skipped with the CUDA
#    runtime's reason, each GPU step failed fast ("no-gpu"), nothing failed, and its table and
#    logs are in the folder LOCKSTEP_GPU_OUT names;
#  - where nvidia-smi lists a GPU (a stand-in here), a GPU test that skips fails, one that hangs is
#    stopped at the step timeout and fails, and gpu-check.sh exits 1.
# Skipped (77), with the reason, where the build has no CUDA or the namespace cannot be made.
# ctest sets LOCKSTEP_BUILD_DIR (its build) and LOCKSTEP_SRC.
set -u
build="${LOCKSTEP_BUILD_DIR:?LOCKSTEP_BUILD_DIR must name the build folder}"
src="${LOCKSTEP_SRC:?LOCKSTEP_SRC must name the source folder}"
bin="$build/apps"
. "$src/tests/helpers/e2e.sh"
e2e_require_apps lockstep-train lockstep-data lockstep-bench
compgen -G "$build/tests/*_gpu_test" >/dev/null ||
  { echo "skipped: $build is a build without CUDA (no *_gpu_test binary)"; exit 77; }
e2e_require_commands unshare mount xz ldd timeout
if ! reason=$(unshare -m --propagation private mount --bind /tmp /tmp 2>&1); then
  echo "skipped: cannot make a private mount namespace: ${reason:-unshare -m failed}"
  exit 77
fi
e2e_workdir gpu-pack

# ---- the pack, as a developer makes it ----
if ! LOCKSTEP_BUILD_DIR="$build" bash "$src/scripts/gpu-pack.sh" --no-build --out "$work/pack" >"$work/pack.log" 2>&1; then
  cat "$work/pack.log"
  echo "FAIL: gpu-pack.sh exits non-zero"
  exit 1
fi
cat "$work/pack.log"
grep -qE '^sizes: .*together [0-9.]+ MiB of 60 MiB$' "$work/pack.log" || fail "gpu-pack.sh prints no sizes"

# ---- what the GPU machine receives: the checkout (what git tracks, or the scripts and tests of a
# copy without git) and the pack as .device/ ----
mkdir -p "$work/device"
if git -C "$src" rev-parse --git-dir >/dev/null 2>&1; then
  (cd "$src" && git ls-files -z -co --exclude-standard | xargs -0 cp --parents -t "$work/device")
else
  cp -r "$src/scripts" "$src/tests" "$work/device/"
fi
cp -r "$work/pack" "$work/device/.device"
# The names the pack carries (libraries, MPI's programs): the same names are hidden on this machine.
xz -dc "$work/pack/lockstep-pack.tar.xz" | tar -tf - |
  awk -F/ '($2 == "closure" && NF == 3) || ($3 == "lib" && $4 == "x86_64-linux-gnu" && NF == 5) ||
           ($3 == "bin" && NF == 4) { print $NF }' | grep -v '^$' >"$work/names.txt"

cat >"$work/inside.sh" <<'INSIDE'
# In the private mount namespace: hide, then run as on the GPU machine.
set -u
work=$1
mkdir -p "$work/empty" "$work/tmp"
: >"$work/empty-file"
# Libraries the tools used here outside the pack (bash, tar, xz, python3, ...) need stay visible;
# the pack's own come first on LD_LIBRARY_PATH anyway, which the ldd check below proves.
keep=" $(ldd "$(command -v bash)" "$(command -v tar)" "$(command -v xz)" "$(command -v python3)" \
           "$(command -v grep)" "$(command -v gawk mawk | head -1)" 2>/dev/null |
         awk '$2 == "=>" { print $1 }' | sort -u | tr '\n' ' ') "
lib=/usr/lib/x86_64-linux-gnu
for d in $lib/openmpi $lib/pmix2 $lib/openblas-pthread $lib/openblas-openmp $lib/openblas-serial \
         $lib/blas $lib/lapack $lib/hdf5 /usr/share/openmpi /usr/share/pmix /etc/openmpi; do
  [[ -d $d ]] && { mount --bind "$work/empty" "$d" || exit 1; }
done
hidden=0
# nor has it ssh, which Open MPI's launcher looks for
for p in /usr/bin/ssh /usr/bin/rsh; do
  [[ -e $p ]] && { mount --bind "$work/empty-file" "$p" || exit 1; }
done
while read -r name; do
  [[ $keep == *" $name "* ]] && continue
  for p in "$lib/$name" "/usr/bin/$name"; do
    [[ -e $p && ! -d $p ]] || continue
    mount --bind "$work/empty-file" "$p" || exit 1
    hidden=$((hidden + 1))
  done
done <"$work/names.txt"
echo "hidden: $hidden system files, ssh, and Open MPI's, PMIx's, OpenBLAS's and HDF5's folders"
[[ -s /usr/bin/orterun ]] && { echo "FAIL: /usr/bin/orterun is still visible"; exit 1; }
export TMPDIR=$work/tmp
cd "$work/device" || exit 1
unset LOCKSTEP_BIN LOCKSTEP_BUILD_DIR MPIEXEC
LOCKSTEP_GPU_OUT=$work/out LOCKSTEP_GPU_STEP_TIMEOUT=120 bash scripts/gpu-check.sh >"$work/gpu-check.log" 2>&1
echo "gpu-check exit $?" >>"$work/gpu-check.log"
# Again, with an nvidia-smi that lists a GPU (a driver the CUDA runtime cannot use) and a GPU test
# that hangs, with 10 s per step.
mkdir -p "$work/fake-bin"
printf '#!/bin/sh\necho "NVIDIA H100 80GB HBM3, 580.00.00, 81559 MiB"\n' >"$work/fake-bin/nvidia-smi"
hang=$(echo "$work"/tmp/lockstep-pack-*/build/tests)/hang_gpu_test
printf '#!/bin/sh\nsleep 100\n' >"$hang"
chmod +x "$work/fake-bin/nvidia-smi" "$hang"
PATH=$work/fake-bin:$PATH LOCKSTEP_GPU_OUT=$work/out-gpu LOCKSTEP_GPU_STEP_TIMEOUT=10 \
  bash scripts/gpu-check.sh >"$work/gpu-check-gpu.log" 2>&1
echo "gpu-check exit $?" >>"$work/gpu-check-gpu.log"
rm -f "$hang"
. .device/env.sh 2>"$work/env.log" || exit 1
cat "$work/env.log"
ldd $(find "$LOCKSTEP_PACK_ROOT" -type f \( -perm -u+x -o -name '*.so*' \) ! -name '*.py' ! -name '*.sh') 2>/dev/null |
  awk -v root="$LOCKSTEP_PACK_ROOT/" '
    /^[^ \t]/ { file = $1 }
    $2 == "=>" && $3 == "not" { print "not found: " $1 " (" file ")" }
    $2 == "=>" && $3 ~ /^\// && index($3, root) != 1 &&
      $1 !~ /^(libc|libm|libmvec|libpthread|libdl|librt|libutil|libresolv|libanl|libnsl|libstdc\+\+|libgcc_s)\.so/ &&
      $1 !~ /^lib(cuda|cudart|cublas|cublasLt|cudnn|nccl|nvrtc|nvJitLink|nvToolsExt)\.so/ {
        print "from the system: " $1 " => " $3 " (" file ")" }' | sort -u >"$work/ldd.log"
cd "$work" || exit 1
"$LOCKSTEP_PACK_BUILD/apps/lockstep-data" regression --out reg.h5 --samples 256 --features 8 \
  >singleton.log 2>&1
echo "singleton exit $?" >>singleton.log
timeout 120 orterun -n 2 "$LOCKSTEP_PACK_BUILD/apps/lockstep-train" --data reg.h5 --model mlp:16 \
  --global-batch 64 --steps 4 --device cpu --progress none >orterun.log 2>&1
echo "orterun exit $?" >>orterun.log
# gpu-check's gpt-loss part writes a GPT's initial parameters with the pack's dump helper.
"$LOCKSTEP_PACK_BUILD/tests/gpt_reference_dump" init.h5 --spec gpt:layers=1,heads=1,dim=8,ctx=8 \
  --steps 0 --batch 1 --seq 8 >dump.log 2>&1
echo "dump exit $?" >>dump.log
INSIDE

unshare -m --propagation private bash "$work/inside.sh" "$work" 2>&1 || fail "the namespace script"

# ---- what the GPU machine would have printed ----
cat "$work/gpu-check.log"
grep -q '^gpu-check exit 3$' "$work/gpu-check.log" || fail "gpu-check.sh without a GPU: exit 3 expected"
summary="$work/out/gpu-check-quick.txt"
[[ -s $summary ]] || fail "no table in LOCKSTEP_GPU_OUT ($summary)"
[[ -s "$work/out/gpu-check-quick-logs.tar.gz" ]] || fail "no logs in LOCKSTEP_GPU_OUT"
grep -qE "^build +reused +.*/lockstep-pack-[^/]+/build \[[0-9]+ s\]$" "$summary" || fail "gpu-check did not take the pack's build"
# Every row says what its step took.
[[ $(grep -cvE ' \[[0-9]+ s\]$' "$summary") -eq 1 ]] || fail "rows without their seconds: $(grep -vE ' \[[0-9]+ s\]$' "$summary")"
for t in "$build"/tests/*_gpu_test "$build"/tests/*_gpu_mpi_test; do
  name=$(basename "$t")
  # NCCL with peers needs ranks of their own NCCL_HOSTID: the long pass's part multi-rank runs it.
  [[ $name == nccl_hosts_gpu_mpi_test ]] && continue
  [[ $name == *_mpi_test ]] && name="$name -n 2"
  grep -qE "^$name +skipped +.*(CUDA|cuda)" "$summary" || fail "$name: not skipped with the CUDA runtime's reason"
done
grep -qE '^trace_gpu_test +skipped' "$summary" || fail "trace_gpu_test.sh: not skipped"
# The traces run lockstep-train, which reads a file: a pack without the data set makes one with
# lockstep-data synthetic (the GPU window of 2026-11-28 failed both on a missing --data synthetic).
for step in "bench collectives nccl" "lockstep cnn fp32, batch 128" "lockstep cnn fp32, batch 1024" \
            "trace cnn fp32, batch 128" "trace cnn fp32, batch 1024"; do
  grep -qE "^$step.* no-gpu " "$summary" || fail "$step: not reported as failing for want of a GPU"
done
grep -E '^.{40} failed ' "$summary" && fail "a step of gpu-check failed"
# Where nvidia-smi lists a GPU, a GPU test that skips fails, and so does one that hangs.
grep -q '^gpu-check exit 1$' "$work/gpu-check-gpu.log" || fail "gpu-check.sh with a GPU listed: exit 1 expected"
summary="$work/out-gpu/gpu-check-quick.txt"
grep -qE '^collectives_gpu_test +failed +skipped although nvidia-smi lists a GPU: .*CUDA' "$summary" ||
  fail "a GPU test that skips where nvidia-smi lists a GPU does not fail"
grep -qE '^hang_gpu_test +failed +timed out after 10 s' "$summary" || fail "a GPU test that hangs is not stopped"

# ---- the environment and the libraries ----
grep -E 'WARNING' "$work/env.log" && fail "env.sh warns"
for lib in $(sed -n 's/^binaries: .*from the GPU machine: //p' "$work/pack.log"); do
  grep -q "^env.sh: $lib -> /" "$work/env.log" || fail "env.sh does not say where $lib is"
done
if [[ -s "$work/ldd.log" ]]; then
  head -20 "$work/ldd.log"
  fail "packed programs load libraries from outside the pack"
fi
cat "$work/singleton.log" "$work/orterun.log"
grep -q '^singleton exit 0$' "$work/singleton.log" || fail "an MPI singleton (lockstep-data) fails"
grep -q '^orterun exit 0$' "$work/orterun.log" || fail "orterun -n 2 lockstep-train fails"
cat "$work/dump.log"
grep -q '^dump exit 0$' "$work/dump.log" || fail "the pack's gpt_reference_dump (gpu-check gpt-loss) fails"
[[ $failures -eq 0 ]] || exit 1
echo "PASS: the pack runs with this machine's MPI, HDF5, Boost and OpenBLAS hidden"
