#!/usr/bin/env bash
# lockstep-bench train, end to end at 1 and 2 ranks on synthetic data: prints samples/s, the step
# time median/min/max (min <= median <= max), a breakdown whose shares add up to 100%, the FLOPs
# per sample counted from the layer shapes (checked against the formula for a one-layer model and
# for the CNN, and the same count in the PyTorch/JAX reference scripts), the achieved GFLOP/s and
# the measured peak, named by the kernel it came from, and the peak resident memory; bad options, and bf16 compute on the CPU, are refused. ctest sets
# LOCKSTEP_BIN, LOCKSTEP_SRC, MPIEXEC.
set -u

bin="${LOCKSTEP_BIN:?LOCKSTEP_BIN must name the apps build folder}"
mpiexec="${MPIEXEC:-mpiexec}"
. "$(dirname "$0")/helpers/e2e.sh"
e2e_require_apps lockstep-bench
e2e_require_commands python3

e2e_workdir bench-train
cd "$work" || exit 1
export TMPDIR="$work"  # the synthetic data files land here and must be gone afterwards


# check FILE RANKS EXPECTED_FORWARD_FLOPS [compute]: "compute" also asks for non-zero forward and
# backward shares (a tiny model's forward can round to 0.0% of a step on a loaded machine).
check() {
  python3 - "$@" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
ranks, want_fwd = int(sys.argv[2]), float(sys.argv[3])
want_compute = len(sys.argv) > 4 and sys.argv[4] == "compute"
kv = dict(re.findall(r"(\w+)=([-\d.e+]+)", text))
problems = []
def num(k):
    if k not in kv:
        problems.append(f"no {k}=")
        return float("nan")
    return float(kv[k])
sps, med, lo, hi = num("samples_per_second"), num("step_ms_median"), num("step_ms_min"), num("step_ms_max")
if not sps > 0: problems.append(f"samples_per_second {sps}")
if not (0 < lo <= med <= hi): problems.append(f"step times min {lo} median {med} max {hi}")
shares = [num(k) for k in ("data", "forward", "backward", "comm", "optimizer", "other")]
if abs(sum(shares) - 100) > 0.5: problems.append(f"breakdown adds up to {sum(shares)}%")
if want_compute and (not shares[1] > 0 or not shares[2] > 0):
    problems.append("forward or backward share is 0")
fwd, train = num("flops_per_sample_forward"), num("flops_per_sample_train")
if abs(fwd - want_fwd) > 1e-3 * want_fwd: problems.append(f"forward FLOPs {fwd}, expected {want_fwd}")
if abs(train - 3 * fwd) > 1e-3 * train: problems.append(f"train FLOPs {train} != 3 x {fwd}")
if not num("achieved_gflops") > 0 or not num("peak_gflops") > 0: problems.append("GFLOP/s not positive")
if not re.search(r"peak_gflops=[\d.]+ \((OpenBLAS sgemm|oneDNN matmul|oneDNN convolution|Lockstep Winograd convolution|cuBLAS)", text):
    problems.append("the peak does not name the kernel it came from")
if f"{ranks} rank(s)" not in text: problems.append(f"header does not say {ranks} rank(s)")
# The host's peak resident memory holds at least the parameters, gradients and optimizer state.
held = (num("param_bytes") + num("grad_bytes") + num("optimizer_state_bytes") + num("master_bytes")) / 2**20
if not num("peak_host_memory_mb") >= held: problems.append(f"peak_host_memory_mb below {held} MB")
for p in problems:
    print(f"FAIL ({sys.argv[1]}):", p)
sys.exit(1 if problems else 0)
PY
}

# CNN forward FLOPs on 28x28x1 -> 10, from the formula: conv 2*H*W*Cout*k*k*Cin, dense 2*in*out.
cnn=$((2 * 28 * 28 * 32 * 9 * 1 + 2 * 14 * 14 * 64 * 9 * 32 + 2 * 7 * 7 * 64 * 10))
"$bin/lockstep-bench" train --model cnn --global-batch 16 --steps 4 --warmup 1 --peak-size 256 \
  >one.txt 2>&1 || fail "1 rank exits $?: $(cat one.txt)"
check one.txt 1 "$cnn" compute || failures=$((failures + 1))
# --zero 1 with a bf16 all-gather keeps fp32 masters and a bf16 copy: they are counted and named.
"$bin/lockstep-bench" train --model cnn --global-batch 16 --steps 2 --warmup 1 --peak-size 64 \
  --zero 1 --gather-dtype bf16 >zb.txt 2>&1 || fail "--gather-dtype bf16 exits $?: $(cat zb.txt)"
grep -qE '^param_bytes=[0-9]+ .* master_bytes=[1-9][0-9]*$' zb.txt || fail "no master_bytes above 0: $(grep bytes= zb.txt)"
grep -q 'master weights' zb.txt || fail "the memory line does not name the master weights: $(cat zb.txt)"
# A share of the peak above 100% says why (a 64^3 product is no measure of the machine's rate:
# gpt:tiny's step ran at 127-207% of it on the Xeon VM); one at or below 100% says nothing of the
# kind.
"$bin/lockstep-bench" train --model gpt:tiny --global-batch 8 --steps 2 --warmup 1 --peak-size 64 \
  >small_peak.txt 2>&1 || fail "--peak-size 64 exits $?: $(cat small_peak.txt)"
for f in one.txt small_peak.txt; do
  share=$(grep -oE '^peak_share=[0-9.]+' "$f" | cut -d= -f2)
  if awk -v s="${share:-0}" 'BEGIN { exit !(s > 100) }'; then
    grep -q '^# the step outran the product timed as the peak' "$f" ||
      fail "$f: peak_share=$share% without the note saying why"
  elif grep -q 'outran the product' "$f"; then
    fail "$f: the note at peak_share=$share%"
  fi
done

# The PyTorch and JAX reference scripts (scripts/reference, run on a GPU machine for the side-by-side
# figures) must count the CNN's FLOPs as lockstep-bench does, so their GFLOP/s compare directly;
# and they must at least parse here, where neither framework is installed.
src="${LOCKSTEP_SRC:?LOCKSTEP_SRC must name the source tree}"
ref=$(python3 -c "import sys; sys.path.insert(0, '$src/scripts/reference'); import common
print(common.flops_per_sample())") || fail "scripts/reference/common.py does not import"
[[ "$ref" == "$cnn" ]] || fail "scripts/reference counts ${ref:-?} forward FLOPs per CNN sample, the formula $cnn"
for script in "$src"/scripts/reference/*.py; do
  python3 -c "import ast, sys; ast.parse(open(sys.argv[1]).read(), sys.argv[1])" "$script" ||
    fail "$script does not parse"
done

$mpiexec -n 2 "$bin/lockstep-bench" train --model linear --global-batch 32 --steps 6 --warmup 1 \
  --peak-size 256 >two.txt 2>&1 || fail "2 ranks exit $?: $(cat two.txt)"
check two.txt 2 $((2 * 784 * 10)) || failures=$((failures + 1))
[[ $(grep -c '^samples_per_second=' two.txt) -eq 1 ]] || fail "2 ranks: figures not printed once (rank 0)"

ls "$work"/lockstep-bench-train-* >/dev/null 2>&1 && fail "synthetic data files left behind"

"$bin/lockstep-bench" train --steps 0 >bad.txt 2>&1 && fail "--steps 0 exits 0"
grep -q -- "--steps" bad.txt || fail "--steps 0 message does not name --steps: $(cat bad.txt)"
$mpiexec -n 2 "$bin/lockstep-bench" train --global-batch 3 --steps 1 >bad.txt 2>&1 &&
  fail "--global-batch 3 at 2 ranks exits 0"
grep -q -- "--global-batch" bad.txt || fail "indivisible batch message does not name --global-batch"
# bf16 compute is a GPU path: on the CPU it is refused in words, as lockstep-train refuses it.
"$bin/lockstep-bench" train --device cpu --precision bf16 --steps 1 >bad.txt 2>&1 &&
  fail "--precision bf16 on the CPU exits 0"
grep -q -- "--precision bf16 needs --device cuda" bad.txt ||
  fail "--precision bf16 on the CPU: $(cat bad.txt)"
"$bin/lockstep-bench" train --precision fp16 --steps 1 >bad.txt 2>&1 && fail "--precision fp16 exits 0"
grep -q -- "--precision must be fp32 or bf16" bad.txt || fail "--precision fp16: $(cat bad.txt)"
"$bin/lockstep-bench" train --peak-size 32 --steps 1 >bad.txt 2>&1 && fail "--peak-size 32 exits 0"
grep -q -- "--peak-size" bad.txt || fail "--peak-size 32 message does not name --peak-size"

[[ $failures -eq 0 ]] && echo "bench_train_test: all checks passed"
exit $((failures > 0))
