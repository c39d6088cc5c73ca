#!/usr/bin/env bash
# One line naming this machine for a benchmark's figures: the CPU model, its widest vector ISA
# (AVX-512 where the CPU has avx512f, else AVX2, else SSE), its cores and the date (UTC). Where the
# environment caps the vector ISA (LOCKSTEP_CPU_ISA, ONEDNN_MAX_CPU_ISA, ATEN_CPU_CAPABILITY,
# MKL_ENABLE_INSTRUCTIONS: an AVX-512 machine emulating an AVX2 one), the line says so: such figures
# are not an AVX2 machine's. OPENBLAS_CORETYPE is named apart.
model=$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
flags=$(grep -m1 '^flags' /proc/cpuinfo)
if [[ $flags == *" avx512f "* ]]; then isa=AVX-512; elif [[ $flags == *" avx2 "* ]]; then isa=AVX2; else isa=SSE; fi
family=$(grep -m1 '^cpu family' /proc/cpuinfo | cut -d: -f2 | tr -d ' ')
cpu_model=$(grep -m1 '^model[[:space:]]*:' /proc/cpuinfo | cut -d: -f2 | tr -d ' ')
caps=""
for v in LOCKSTEP_CPU_ISA ONEDNN_MAX_CPU_ISA ATEN_CPU_CAPABILITY MKL_ENABLE_INSTRUCTIONS; do
  [[ -n ${!v:-} ]] && caps+=" $v=${!v}"
done
[[ -n $caps ]] && isa+=" capped by${caps}"
# OpenBLAS runs no training step on either side (ours are oneDNN's and our kernels, PyTorch's MKL's
# and ATen's); some machines set its core type in their environment, so it is named apart.
[[ -n ${OPENBLAS_CORETYPE:-} ]] && isa+=" (OpenBLAS, in no training step, capped by OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE)"
echo "machine: ${model:-unknown CPU} (family ${family:-?} model ${cpu_model:-?}), $isa, $(nproc) cores; $(date -u '+%Y-%m-%d %H:%M UTC')"
