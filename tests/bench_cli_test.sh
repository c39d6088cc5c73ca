#!/usr/bin/env bash
# lockstep-bench end to end at 2 ranks with small sizes: the collectives table has its columns,
# every collective and size, bus bandwidth in the nccl-tests ratio to algorithm bandwidth, and 0
# wrong values (also for other element types and ops); the overhead subcommand prints its ratio;
# gemm times a small GPT's products and counts its FLOPs;
# bad flag values give one clear error line and a non-zero exit on every rank, never a hang.
# ctest sets LOCKSTEP_BIN (the apps build folder) and MPIEXEC.
set -u

bin="${LOCKSTEP_BIN:?LOCKSTEP_BIN must name the apps build folder}"
mpiexec="${MPIEXEC:-mpiexec}"
. "$(dirname "$0")/helpers/e2e.sh"
e2e_require_apps lockstep-bench
bin=$bin/lockstep-bench

run2() { timeout 300 "$mpiexec" -n 2 --oversubscribe "$bin" "$@"; }

# A bad input: one error line naming the problem (rank 0's), a non-zero exit, every rank leaves.
expect_error() {
  local pattern=$1
  shift
  local out rc
  out=$(run2 "$@" 2>&1)
  rc=$?
  if [[ $rc -eq 0 || $rc -eq 124 ]]; then
    fail "'$*' exited $rc, expected an error"
    return
  fi
  grep -q -- "$pattern" <<<"$out" || fail "'$*': no message matching '$pattern' in:"$'\n'"$out"
  local count
  count=$(grep -c '^error:' <<<"$out")
  [[ $count -eq 1 ]] || fail "'$*': $count error lines, expected 1 (rank 0 only)"$'\n'"$out"
}

# Data rows are the lines that do not start with '#'.
rows() { grep -v '^#' <<<"$1" | grep -v '^[[:space:]]*$'; }

# --- the table: columns, collectives, sizes, wrong values, busbw factors ---
out=$(run2 collectives -b 8 -e 64K -f 8 -w 1 -n 3 2>/dev/null)
rc=$?
[[ $rc -eq 0 ]] || fail "collectives at 2 ranks exited $rc"$'\n'"$out"
for col in 'size(B)' count type redop root 'min(us)' 'avg(us)' 'max(us)' 'algbw(GB/s)' \
           'busbw(GB/s)' '#wrong'; do
  grep -q -- "$col" <<<"$out" || fail "column '$col' missing from the table"
done
for c in all_reduce broadcast all_gather reduce_scatter; do
  grep -q "^# $c " <<<"$out" || fail "no table for $c"
done
# 8, 64, 512, 4 KiB, 32 KiB for each of 4 collectives.
n=$(rows "$out" | wc -l)
[[ $n -eq 20 ]] || fail "expected 20 rows (4 collectives x 5 sizes), got $n"$'\n'"$out"
bad=$(rows "$out" | awk 'NF != 11 || $11 != 0' | wc -l)
[[ $bad -eq 0 ]] || fail "$bad rows with a wrong-value count or a column missing"$'\n'"$out"
grep -q '^# wrong values: 0' <<<"$out" || fail "no '# wrong values: 0' summary"
# At 2 ranks busbw = algbw for all_reduce and broadcast, algbw / 2 for all_gather/reduce_scatter.
bad=$(awk '/^# all_reduce |^# broadcast / { f = 1 } /^# all_gather |^# reduce_scatter / { f = 0.5 }
           !/^#/ && NF == 11 { d = $10 - f * $9; if (d > 0.002 || d < -0.002) print }' <<<"$out")
[[ -z $bad ]] || fail "busbw does not follow the nccl-tests factor at 2 ranks:"$'\n'"$bad"
# The sizes column: all_reduce 8 B is 2 float32; all_gather at 2 ranks rounds to whole blocks.
rows "$out" | head -1 | awk '$1 != 8 || $2 != 2 { exit 1 }' || fail "first row is not 8 B = 2 float32"
# NCCL: either measured or skipped with a reason.
grep -Eq '^# backend nccl: skipped, .{10,}|^# backend nccl \(' <<<"$out" ||
  fail "no nccl table and no line saying why it was skipped"

# --- other element types and ops are checked too ---
for args in "--dtype bfloat16 --op mean" "--dtype int32 --op max" "--dtype uint8 --op min" \
            "--dtype float64 --op sum --root 1" "--dtype float16 --op sum --blocking"; do
  # shellcheck disable=SC2086
  out=$(run2 collectives --backend mpi -b 16 -e 16K -f 1024 -w 0 -n 2 $args 2>/dev/null)
  rc=$?
  [[ $rc -eq 0 ]] || fail "collectives $args exited $rc"$'\n'"$out"
  bad=$(rows "$out" | awk 'NF != 11 || $11 != 0' | wc -l)
  [[ $bad -eq 0 && $(rows "$out" | wc -l) -eq 8 ]] || fail "collectives $args:"$'\n'"$out"
done

# --- overhead: both medians, a ratio per size (a small one on the calling thread, a large one
# through the progress thread), correct results ---
out=$(run2 overhead -b 8,1M -w 1 -n 2 --small-iters 2 -r 2 2>/dev/null)
rc=$?
[[ $rc -eq 0 ]] || fail "overhead exited $rc"$'\n'"$out"
grep -Eq '^# overhead ratio \(lockstep / mpi medians\): 8 B [0-9]+\.[0-9]+, 1 MiB [0-9]+\.[0-9]+$' \
  <<<"$out" || fail "overhead prints no ratio per size"$'\n'"$out"
[[ $(grep -Ec '^ +(8 B|1 MiB) +4 ' <<<"$out") -eq 2 ]] ||
  fail "overhead's summary has no row of 4 samples per size"$'\n'"$out"
grep -q '^# wrong values: lockstep 0, mpi 0$' <<<"$out" || fail "overhead results wrong"$'\n'"$out"

# --- gemm: a GPT's 15 products, each with oneDNN's and OpenBLAS's times (or OpenBLAS's alone in a
# build without oneDNN), the step's FLOPs as the shapes give them: 2 blocks of dim 32 and a
# 256-token head at 2 x 16 rows a rank: 3 x 2 x 32 x 12 x 32^2 x 2 + 3 x 2 x 32 x 256 x 32 ---
out=$(run2 gemm --model gpt:layers=2,heads=2,dim=32,ctx=16 --global-batch 4 --repetitions 2 \
        --peak-size 64 2>&1)
rc=$?
[[ $rc -eq 0 ]] || fail "gemm at 2 ranks exited $rc"$'\n'"$out"
grep -q '^# lockstep-bench gemm: gpt:layers=2,heads=2,dim=32,ctx=16 (2 blocks, dim 32, context 16, vocabulary 256), 32 rows a rank, cpu' <<<"$out" ||
  fail "gemm's header does not name the model and the rows"$'\n'"$out"
products=$(grep -cE '^(qkv|proj|fc|fc2|head) (forward|dx|dw) ' <<<"$out")
[[ $products -eq 15 ]] || fail "gemm: $products product rows, expected 15"$'\n'"$out"
bad=$(grep -E '^(qkv|proj|fc|fc2|head) ' <<<"$out" |
      awk -F'|' '{ for (i = 2; i <= NF; ++i) { split($i, f, " "); if (!(f[1] > 0 && f[2] > 0)) print } }')
[[ -z $bad ]] || fail "gemm rows without a positive time and rate:"$'\n'"$bad"
grep -q '^gemm_flops_per_step=6.291e+06$' <<<"$out" || fail "gemm's FLOPs per step are not 6.291e+06"$'\n'"$out"
columns=$(grep -c '^gemm_ms_per_step=[0-9.]* share_of_peak=[0-9.]*% ' <<<"$out")
[[ $columns -ge 1 ]] || fail "gemm prints no step total"$'\n'"$out"

# --- gemm --precision bf16 on the CPU: oneDNN's fp32, bf16 and bf16-with-casts columns against
# its bf16 peak where oneDNN has a bf16 matmul for this CPU (AVX-512); else (AVX2, or a build
# without oneDNN) one error saying so. Capped to AVX2 it never has one. ---
bf16=(gemm --model gpt:layers=2,heads=2,dim=32,ctx=16 --global-batch 4 --repetitions 2
      --peak-size 64 --precision bf16)
no_bf16="has no bf16 matmul for this CPU\|needs oneDNN (this build has none)"
if ! grep -q '^# lockstep-bench gemm: .*AVX-512' <<<"$out"; then
  expect_error "$no_bf16" "${bf16[@]}"
else
  out=$(run2 "${bf16[@]}" 2>&1)
  rc=$?
  [[ $rc -eq 0 ]] || fail "gemm --precision bf16 at 2 ranks exited $rc"$'\n'"$out"
  grep -q '^# lockstep-bench gemm: .*, cpu, bf16, ' <<<"$out" || fail "bf16 header"$'\n'"$out"
  grep -q '^# peak: oneDNN matmul bf16 64^3, ' <<<"$out" || fail "bf16 peak not named"$'\n'"$out"
  bad=$(grep -E '^(qkv|proj|fc|fc2|head) ' <<<"$out" |
        awk -F'|' 'NF != 4 { print; next }
                   { for (i = 2; i <= NF; ++i) { split($i, f, " "); if (!(f[1] > 0 && f[2] > 0)) print } }')
  [[ -z $bad ]] || fail "bf16 rows without three positive times and rates:"$'\n'"$bad"
  for c in 'oneDNN matmul fp32' 'oneDNN matmul bf16' 'oneDNN bf16 with the casts'; do
    grep -q "^gemm_ms_per_step=[0-9.]* share_of_peak=[0-9.]*% ($c)$" <<<"$out" ||
      fail "no step total for '$c'"$'\n'"$out"
  done
fi

# --- bad input: one error line naming the problem, non-zero exit, every rank leaves ---
expect_error "is not a byte size" collectives -b 12Q
expect_error "is not a byte size" collectives -e 4X
expect_error "is below -b/--minbytes" collectives -b 1M -e 1K
expect_error "stepfactor must be 2 or more" collectives -f 1
expect_error "is not a collective" collectives -c all_reduce,allreduce
expect_error "is not an element type" collectives --dtype float8
expect_error "is not a reduction" collectives --op avg
expect_error "unknown communicator backend" collectives --backend tcp
expect_error "iters must be 1 or more" collectives -n 0
expect_error "is not a rank of this world of 2" collectives --root 2
expect_error "invalid" collectives -w many
expect_error "unrecognised option\|unrecognized option" collectives --bogus
expect_error "unknown command 'frobnicate'" frobnicate
expect_error "unknown command 'trian'; did you mean train?" trian
expect_error "unrecognised option '--stpes'; did you mean --steps?" train --stpes 3
expect_error "too many positional options" collectives 64M
expect_error "rounds must be 1 or more" overhead -r 0
expect_error "is not a byte size" overhead -b 8,64Q
expect_error "at least one float32" overhead -b 8,2
expect_error "times a GPT's products" gemm --model cnn
expect_error "must divide by the ranks (2)" gemm --model gpt:tiny --global-batch 3
expect_error "repetitions must be in" gemm --repetitions 0
ONEDNN_MAX_CPU_ISA=AVX2 expect_error "$no_bf16" "${bf16[@]}"
if ! "$bin" collectives --backend all -b 8 -e 8 -n 1 -w 0 2>/dev/null | grep -q '^# backend nccl ('; then
  expect_error "--backend nccl: " collectives --backend nccl -b 8 -e 8
fi

if # --- the options lockstep-bench train shares with lockstep-train: the same refusals, word for word ---
train_bin="${bin%/lockstep-bench}/lockstep-train"
if [[ -x $train_bin ]]; then
  for bad in "--global-batch -3" "--device gpu" "--precision fp8" "--optimizer lion" \
             "--weight-decay x" "--clip-norm -1" "--cuda-graphs maybe" "--threads 1.5" \
             "--data-in-memory-mb -2"; do
    # shellcheck disable=SC2086  # the option and its value are two words on purpose
    from_train=$("$train_bin" $bad 2>&1 | grep -m1 '^error:')
    # shellcheck disable=SC2086
    from_bench=$("$bin" train $bad 2>&1 | grep -m1 '^error:')
    [[ -n $from_train && $from_train == "$from_bench" ]] ||
      fail "lockstep-bench train $bad: '$from_bench', lockstep-train: '$from_train'"
  done
fi

[[ $failures -gt 0 ]]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all lockstep-bench checks passed"
