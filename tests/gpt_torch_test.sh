#!/usr/bin/env bash
# Lockstep's GPT against PyTorch (issue 20): tests/helpers/gpt_reference_dump builds a tiny
# gpt:layers=2,heads=2,dim=32,ctx=16 on the CPU, writes its initial parameters, one batch's loss
# and gradients, and 20 AdamW steps (decay on matrices only, warm-up and cosine, clipping), and
# scripts/reference/gpt_compare_torch.py loads the same weights into gpt_torch.Gpt and recomputes
# everything in float32: loss and gradients within 1e-5, parameters after 20 steps within 1e-4
# (max |a - b| / max |b| per tensor; the key third of attn.qkv.bias, whose gradient is zero in
# exact arithmetic and so Adam-amplified rounding noise in both, is bounded by how far it moves
# instead: gpt_compare_torch.py says why). Run with both CPU kernel sets (OpenBLAS, and oneDNN
# where built: "best"). PyTorch is Debian's (python3-torch and python3-h5py for /usr/bin/python3, from
# scripts/setup.sh --test); without it the test is skipped, saying so. ctest sets LOCKSTEP_SRC and
# LOCKSTEP_GPT_REFERENCE_DUMP.
# Then the trainer itself: lockstep-train on 1 and 2 ranks, 12 AdamW steps of a tiny GPT on one
# global batch of 8 random rows, from the dump's initial parameters for its seed, against
# scripts/reference/gpt_loss_torch.py training gpt_torch.Gpt on the same rows: every step's loss
# within 1e-4 (relative); a run from another seed must fail that comparison. (The GPU pack runs
# the same comparison on a GPU, fp32 and bf16: scripts/gpu-check.sh part gpt-loss.)
# Last, the side by side's peer, scripts/reference/gpt_torch_ddp.py, at one rank in fp32 and under
# bf16 autocast: its header names the precision, and bf16's loss is within 2% of fp32's.
set -u

src="${LOCKSTEP_SRC:?LOCKSTEP_SRC must name the source tree}"
dump="${LOCKSTEP_GPT_REFERENCE_DUMP:?LOCKSTEP_GPT_REFERENCE_DUMP must name the gpt_reference_dump program}"
bin="${LOCKSTEP_BIN:?LOCKSTEP_BIN must name the apps build folder}"
mpiexec="${MPIEXEC:-mpiexec}"
. "$(dirname "$0")/helpers/e2e.sh"

e2e_require_torch_and "$dump"
e2e_workdir gpt-reference

for kernels in openblas best; do
  out=$(timeout 120 "$dump" "$work/gpt-$kernels.h5" --kernels "$kernels" 2>&1)
  [[ $? -eq 0 ]] || { fail "gpt_reference_dump --kernels $kernels exited non-zero"$'\n'"$out"; continue; }
  out=$(timeout 300 /usr/bin/python3 "$src/scripts/reference/gpt_compare_torch.py" \
        "$work/gpt-$kernels.h5" --tol 1e-5 --tol-params 1e-4 2>&1)
  rc=$?
  echo "$out"
  [[ $rc -eq 0 ]] || fail "Lockstep's GPT ($kernels kernels) differs from PyTorch beyond tolerance"
  for want in 'grad embed0.wte' 'grad block1.attn.qkv.weight' 'grad lmhead3.ln.bias' \
              'params after 20 steps block2.mlp.proj.weight' 'max parameter error after 20 steps'; do
    grep -qF -- "$want" <<<"$out" || fail "the comparison ($kernels) lacks '$want'"
  done
done
# The trainer's losses against PyTorch's, step by step.
spec=gpt:layers=2,heads=2,dim=32,ctx=32
train=(--model "$spec" --global-batch 8 --steps 12 --optimizer adamw --lr 3e-3 --weight-decay 0.1
       --clip-norm 1 --lr-schedule cosine --warmup-steps 2 --min-lr 1e-4 --beta2 0.95
       --log-every 1 --threads 1 --progress none)
compare=(--lr 3e-3 --warmup 2 --min-lr 1e-4 --schedule cosine --weight-decay 0.1 --beta2 0.95
         --clip-norm 1 --tol 1e-4)
if ! timeout 60 "$dump" "$work/init.h5" --spec "$spec" --seed 7 --steps 0 --batch 1 --seq 32 \
       >/dev/null 2>&1 ||
   ! timeout 60 "$bin/lockstep-data" synthetic --kind tokens --samples 8 --test-samples 2 \
       --seq-len 32 -o "$work/rows.h5" >/dev/null 2>&1; then
  fail "could not write the initial parameters or the rows"
else
  for run in "1 7" "2 7" "1 8"; do
    read -r ranks seed <<<"$run"
    metrics=$work/run-$ranks-$seed.jsonl
    out=$(timeout 120 "$mpiexec" -n "$ranks" --oversubscribe --bind-to none "$bin/lockstep-train" \
          "${train[@]}" --data "$work/rows.h5" --seed "$seed" --metrics "$metrics" 2>&1) ||
      { fail "lockstep-train on $ranks rank(s) exited non-zero: $out"; continue; }
    out=$(timeout 300 /usr/bin/python3 "$src/scripts/reference/gpt_loss_torch.py" \
          --init "$work/init.h5" --data "$work/rows.h5" --metrics "$metrics" "${compare[@]}" 2>&1)
    rc=$?
    echo "$out"
    if [[ $seed == 7 ]]; then
      [[ $rc -eq 0 ]] || fail "lockstep-train on $ranks rank(s): losses differ from PyTorch's"
      grep -q '^max relative loss difference over the steps' <<<"$out" ||
        fail "the loss comparison printed no summary"
    else
      [[ $rc -eq 1 ]] ||
        fail "a run from another seed passed the comparison (exit $rc): it cannot tell runs apart"
    fi
  done
fi

# The side by side's peer (gpt_torch_ddp.py) at one rank, fp32 and under bf16 autocast: a header
# naming the precision, a rate, and the same training within bf16's rounding.
declare -A peer_loss
for precision in fp32 bf16; do
  out=$(timeout 300 /usr/bin/python3 "$src/scripts/reference/gpt_torch_ddp.py" --ranks 1 \
        --threads 1 --model "$spec" --data "$work/rows.h5" --global-batch 4 --steps 2 --warmup 1 \
        --eval-rows 0 --precision "$precision" 2>&1)
  rc=$?
  echo "$out"
  [[ $rc -eq 0 ]] || { fail "gpt_torch_ddp.py --precision $precision exited $rc"; continue; }
  label=fp32
  [[ $precision == bf16 ]] && label="bf16 autocast"
  grep -q "^# PyTorch .* x 32 tokens, $label, 2 timed steps" <<<"$out" ||
    fail "gpt_torch_ddp.py --precision $precision: no header naming it"
  grep -qE '^tokens_per_second=[0-9]+\.[0-9] ' <<<"$out" || fail "gpt_torch_ddp.py: no tokens_per_second"
  peer_loss[$precision]=$(sed -n 's/^train_loss=\([0-9.]*\) .*/\1/p' <<<"$out")
done
if [[ -n ${peer_loss[fp32]:-} && -n ${peer_loss[bf16]:-} ]]; then
  awk -v a="${peer_loss[fp32]}" -v b="${peer_loss[bf16]}" \
      'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && d < 0.02 * a) }' ||
    fail "gpt_torch_ddp.py: bf16's train loss ${peer_loss[bf16]} is not within 2% of fp32's ${peer_loss[fp32]}"
fi

if [[ $failures -gt 0 ]]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "Lockstep's GPT matches PyTorch: loss and gradients within 1e-5, parameters after 20 AdamW steps within 1e-4, lockstep-train's losses on 1 and 2 ranks within 1e-4"
