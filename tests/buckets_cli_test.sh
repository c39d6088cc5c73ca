#!/usr/bin/env bash
# lockstep-train's reduction and precision options end to end: --help lists --bucket-mb,
# --precision and --grad-reduce-dtype with their defaults; what the CPU build cannot do is refused
# with exit 2 and a message naming the option; and at 2 ranks an MLP trained with one bucket per
# layer (--bucket-mb 0.00001) ends at the same test loss, to the printed digit, as one all-reduce
# after the backward pass (--bucket-mb 0). ctest sets LOCKSTEP_BIN and MPIEXEC.
set -u

bin="${LOCKSTEP_BIN:?LOCKSTEP_BIN must name the apps build folder}"
mpiexec="${MPIEXEC:-mpiexec}"
. "$(dirname "$0")/helpers/e2e.sh"
e2e_require_apps lockstep-train lockstep-data

e2e_workdir buckets

help=$("$bin/lockstep-train" --help 2>&1)
for want in "--bucket-mb arg (=25)" "--precision arg (=fp32)" "--grad-reduce-dtype arg (=fp32)"; do
  grep -qF -- "$want" <<<"$help" || fail "--help does not show '$want'"
done

data="$work/regression.h5"
"$bin/lockstep-data" regression --out "$data" --samples 200 --features 5 --noise 0.1 --seed 3 \
  >/dev/null 2>&1 || { echo "FAIL: lockstep-data regression could not write $data"; exit 1; }

# refused "OPTIONS" "TEXT": exit 2 with TEXT in the message.
refused() {
  local out rc
  # shellcheck disable=SC2086
  out=$("$bin/lockstep-train" --data "$data" --model linear --steps 1 --progress none $1 2>&1)
  rc=$?
  [[ $rc -eq 2 ]] || fail "'$1' exited $rc, expected 2"
  grep -qF -- "$2" <<<"$out" || fail "'$1' did not say '$2': $out"
}
refused "--precision bf16" "--precision bf16 needs --device cuda"
refused "--precision fp16" "--precision must be fp32 or bf16"
refused "--grad-reduce-dtype int8" "--grad-reduce-dtype must be fp32 or bf16"
refused "--bucket-mb -1" "--bucket-mb must be between 0"
# --device cuda trains where a GPU answers; elsewhere it is refused saying why (no CUDA in this
# build, or no device).
cuda_out=$("$bin/lockstep-train" --data "$data" --model linear --steps 1 --progress none \
  --device cuda 2>&1)
cuda_rc=$?
if [[ $cuda_rc -ne 0 ]]; then
  [[ $cuda_rc -eq 2 ]] || fail "'--device cuda' exited $cuda_rc, expected 0 or 2: $cuda_out"
  grep -qE -- "built without CUDA|no CUDA device" <<<"$cuda_out" ||
    fail "'--device cuda' was refused without saying why: $cuda_out"
fi

# test_loss after training with BUCKET_MB at 2 ranks.
loss() {
  timeout 300 "$mpiexec" -n 2 --oversubscribe "$bin/lockstep-train" --data "$data" \
    --model mlp:16,8 --optimizer momentum --lr 0.01 --global-batch 40 --steps 20 --seed 2 \
    --progress none --bucket-mb "$1" 2>&1 | sed -n 's/^test_loss=//p' | tail -1
}
one=$(loss 0)
many=$(loss 0.00001)
echo "2 ranks: test_loss $one with one all-reduce, $many with a bucket per layer"
[[ -n $one ]] || fail "no test_loss from the --bucket-mb 0 run"
[[ $one == "$many" ]] || fail "bucketed reduction changed the result: $many vs $one"

[[ $failures -eq 0 ]] && echo "buckets_cli_test: all passed"
exit $((failures > 0))
