#!/usr/bin/env bash
# The GPT kernels against PyTorch: tests/helpers/gpt_kernels_dump writes the CPU twins' inputs,
# outputs and gradients (GELU, layer norm, embedding, causal attention, cross-entropy over byte
# logits) and scripts/reference/gpt_kernels_torch.py recomputes them with torch.nn.functional and
# autograd in float64, asserting a max relative error of 1e-5 per tensor. PyTorch is Debian's
# (python3-torch and python3-h5py for /usr/bin/python3, from scripts/setup.sh --test); without it
# the test is skipped, saying so. ctest sets LOCKSTEP_SRC and LOCKSTEP_GPT_DUMP.
set -u

src="${LOCKSTEP_SRC:?LOCKSTEP_SRC must name the source tree}"
dump="${LOCKSTEP_GPT_DUMP:?LOCKSTEP_GPT_DUMP must name the gpt_kernels_dump program}"
. "$(dirname "$0")/helpers/e2e.sh"

e2e_require_torch_and "$dump"
e2e_workdir gpt-torch

out=$(timeout 120 "$dump" "$work/gpt.h5" 2>&1)
[[ $? -eq 0 ]] || fail "gpt_kernels_dump exited non-zero"$'\n'"$out"
out=$(timeout 300 /usr/bin/python3 "$src/scripts/reference/gpt_kernels_torch.py" "$work/gpt.h5" --tol 1e-5 2>&1)
rc=$?
echo "$out"
[[ $rc -eq 0 ]] || fail "a GPT kernel differs from PyTorch by more than 1e-5"
for want in 'attention      dqkv' 'layernorm      dgamma' 'embedding      dwte' 'gelu           dx' \
            'cross_entropy  dlogits'; do
  grep -qF -- "$want" <<<"$out" || fail "the comparison lacks '$want'"
done
if [[ $failures -gt 0 ]]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all GPT kernels match PyTorch within 1e-5"
