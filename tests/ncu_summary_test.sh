#!/usr/bin/env bash
# scripts/ncu-summary.py, which gpu-check's gpt-kernels part runs over Nsight Compute's CSV: from a
# file in that format (the program's own output mixed in, times in ns and us, a thousands
# separator, a metric not asked for, a product with a GELU epilogue), each kind's milliseconds per step, the kinds sorted by time,
# the heaviest kernels; a file without kernel times and a bad --steps are refused. ctest sets
# LOCKSTEP_SRC.
set -u

src="${LOCKSTEP_SRC:-$(cd "$(dirname "$0")/.." && pwd)}"
. "$(dirname "$0")/helpers/e2e.sh"
e2e_workdir ncu_summary
cd "$work" || exit 1
summary="$src/scripts/ncu-summary.py"

cat >k.csv <<'CSV'
==PROF== Connected to process 4242 (lockstep-bench)
lockstep-bench train: device cuda, 1 rank(s)
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","4242","lockstep-bench","127.0.0.1","void lockstep::kernels::(anonymous namespace)::flash_forward_kernel<64>(const unsigned short *, float *)","1","7","(128, 1, 1)","(16, 96, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","nsecond","1,500,000"
"1","4242","lockstep-bench","127.0.0.1","sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64","1","7","(384, 1, 1)","(132, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","usecond","800"
"2","4242","lockstep-bench","127.0.0.1","cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3","1","7","(384, 1, 1)","(8, 96, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","nsecond","500000"
"3","4242","lockstep-bench","127.0.0.1","void cub::CUB_300000_SM_900::DeviceRadixSortOnesweepKernel<cub::detail::radix::policy_hub<unsigned int, int, int>::Policy900, false, unsigned int, int, int, int>(int *)","1","7","(256, 1, 1)","(32, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","nsecond","20000"
"4","4242","lockstep-bench","127.0.0.1","void lockstep::kernels::(anonymous namespace)::gelu_forward_kernel(const float *, float *, unsigned long, unsigned short *, unsigned short *)","1","7","(256, 1, 1)","(8192, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","nsecond","100000"
"4","4242","lockstep-bench","127.0.0.1","void lockstep::kernels::(anonymous namespace)::gelu_forward_kernel(const float *, float *, unsigned long, unsigned short *, unsigned short *)","1","7","(256, 1, 1)","(8192, 1, 1)","0","9.0","Command line profiler metrics","dram__bytes.sum","byte","999999999"
"5","4242","lockstep-bench","127.0.0.1","void lockstep::kernels::(anonymous namespace)::mystery_kernel(float *)","1","7","(256, 1, 1)","(1, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","nsecond","2000"
"6","4242","lockstep-bench","127.0.0.1","void lockstep::kernels::(anonymous namespace)::flash_forward_kernel<64>(const unsigned short *, float *)","1","7","(128, 1, 1)","(16, 96, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","nsecond","1,500,000"
"7","4242","lockstep-bench","127.0.0.1","nvjet_sm90_tst_192x128_64x5_1x2_h_bz_coopA_geluauxbias_auxt_NNN","1","7","(384, 1, 1)","(132, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","usecond","200"
==PROF== Disconnected from process 4242
step_ms_median=20.1
CSV

out=$(python3 "$summary" k.csv --steps 2 --top 3) || fail "ncu-summary.py exits $? on a good file"
echo "$out"
expect_line() { grep -qE "$1" <<<"$out" || fail "no line matching '$1' in: $out"; }
expect_line '^8 kernel launches, 2\.311 ms a step'
expect_line '^attention +1\.750 +75\.7%$'
# cuBLASLt's product with the GELU in its epilogue is a product, not the GELU.
expect_line '^GEMMs +0\.500 +21\.6%$'
expect_line '^GELU +0\.050 '
expect_line '^embedding +0\.010 '
expect_line '^other +0\.001 '
# The kinds heaviest first, then the top kernels, flash's two launches together.
[[ $(grep -E '^(attention|GEMMs|GELU)' <<<"$out" | cut -d' ' -f1 | tr '\n' ' ') == "attention GEMMs GELU " ]] ||
  fail "kinds not sorted by time: $out"
expect_line '^ +1\.500 +2  void lockstep::kernels::\{anon\}::flash_forward_kernel<64>$'

printf 'lockstep-bench train: nothing profiled\n' >empty.csv
python3 "$summary" empty.csv >/dev/null 2>err.txt
[[ $? -eq 1 ]] || fail "a file without kernel times: expected exit 1"
grep -q "no gpu__time_duration.sum rows" err.txt || fail "no reason given: $(cat err.txt)"
python3 "$summary" k.csv --steps 0 >/dev/null 2>&1
[[ $? -eq 2 ]] || fail "--steps 0: expected exit 2"
e2e_finish ncu_summary_test
