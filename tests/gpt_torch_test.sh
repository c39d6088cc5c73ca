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
set -u

src="${LOCKSTEP_SRC:?LOCKSTEP_SRC must name the source tree}"
dump="${LOCKSTEP_GPT_REFERENCE_DUMP:?LOCKSTEP_GPT_REFERENCE_DUMP must name the gpt_reference_dump program}"
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
if [[ $failures -gt 0 ]]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "Lockstep's GPT matches PyTorch: loss and gradients within 1e-5, parameters after 20 AdamW steps within 1e-4"
