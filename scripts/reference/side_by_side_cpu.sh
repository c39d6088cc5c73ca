#!/usr/bin/env bash
# Lockstep against PyTorch on this machine's CPUs, in one run: the Fashion-MNIST CNN, Adam,
# global batch 128, synthetic data, (a) 1 rank with 2 threads against PyTorch with 2 threads,
# (b) 2 ranks with 1 thread each against PyTorch DDP (gloo) with 2 ranks of 1 thread. The runs
# alternate Lockstep / PyTorch, ROUNDS times (default 3); the last lines are the medians of
# samples/s and their ratios. Load averages before and after are printed: other work on the
# machine shows up directly in these figures. The environment reaches both frameworks alike (both
# run on libgomp: OMP_WAIT_POLICY=passive helps on a loaded machine, docs/PERFORMANCE.md); STEPS
# sets the timed steps per run (default 100 for the CNN, whose 40 steps of 10 ms were short
# enough for one hiccup of a shared VM to move a median; 40 for the GPT), PYTHON the interpreter
# that has torch: by default the peers venv of today's PyPI releases (scripts/peers-venv.sh,
# build/peers-venv), else Debian's python3 with PyTorch 1.13, which the report then labels an old
# release. The report's first
# lines name the machine (CPU model, vector ISA, date) and the peer's version.
# MODEL=gpt compares the byte-level GPT instead (issue 20): `gpt` (the tiny preset), AdamW with
# weight decay 0.1 and clipping at 1, global batch 32 sequences of 128 bytes, against
# gpt_torch_ddp.py, on DATA (default: a corpus of /usr/share/common-licenses made with
# lockstep-data text in a temporary folder); its figures are tokens/s.
# ISA=avx2 makes an AVX-512 machine behave as an AVX2 one on both sides, every library capped
# alike (our kernels, oneDNN and OpenBLAS; PyTorch's ATen kernels and MKL, whose GEMMs would
# otherwise keep AVX-512 and run twice as fast): emulated figures, which the machine line labels.
#   bash scripts/reference/side_by_side_cpu.sh [build-dir] [rounds]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
case ${ISA:-} in
  avx2) export LOCKSTEP_CPU_ISA=avx2 ONEDNN_MAX_CPU_ISA=AVX2 OPENBLAS_CORETYPE=HASWELL \
          ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ;;
  "") ;;
  *) echo "side_by_side_cpu: ISA=${ISA} (only avx2, or unset for the machine's own)" >&2; exit 2 ;;
esac
build=${1:-$root/build}
rounds=${2:-3}
model=${MODEL:-cnn}
steps=${STEPS:-$([[ $model == gpt ]] && echo 40 || echo 100)}
peers_python=$build/peers-venv/bin/python
if [[ -z ${PYTHON:-} && -x $peers_python ]] && "$peers_python" -c "import torch" 2>/dev/null; then
  python=$peers_python
else
  python=${PYTHON:-/usr/bin/python3}
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
bench="$build/apps/lockstep-bench"
[[ -x $bench ]] || { echo "side_by_side_cpu: no $bench (build first: scripts/build.sh)" >&2; exit 1; }
"$python" -c "import torch" 2>/dev/null ||
  { echo "side_by_side_cpu: $python cannot import torch (apt-get install python3-torch)" >&2; exit 1; }

bash "$root/scripts/reference/machine.sh"
peer=$("$python" -c "import torch; print(torch.__version__)")
echo "peer: PyTorch $peer ($python)"
[[ $python == "$peers_python" ]] ||
  echo "peer: not the current release (make one with scripts/peers-venv.sh): label these ratios 'against PyTorch $peer'"

if [[ $model == gpt ]]; then
  unit=tokens_per_second
  data=${DATA:-}
  if [[ -z $data ]]; then
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    data=$tmp/licenses.h5
    "$build/apps/lockstep-data" text --in /usr/share/common-licenses/* --out "$data" --seq-len 128 >/dev/null
  fi
  lockstep_args=(--model gpt --data "$data" --global-batch 32 --optimizer adamw --weight-decay 0.1
                 --clip-norm 1 --steps "$steps")
  torch_script=$root/scripts/reference/gpt_torch_ddp.py
  torch_args=(--model gpt --data "$data" --global-batch 32 --steps "$steps" --warmup 5)
else
  unit=samples_per_second
  lockstep_args=(--model cnn --global-batch 128 --steps "$steps")
  torch_script=$root/scripts/reference/cnn_torch_ddp.py
  torch_args=(--data synthetic --global-batch 128 --steps "$steps" --warmup 5)
fi
sps() { sed -n "s/^$unit=\([0-9.]*\).*/\1/p" | head -1; }
declare -A results
run() {  # run NAME COMMAND...: prints the command's samples/s and keeps it under NAME
  local out value
  out=$("${@:2}" 2>&1) || { echo "$1 failed: $out" >&2; exit 1; }
  value=$(sps <<<"$out")
  [[ -n $value ]] || { echo "$1 printed no $unit: $out" >&2; exit 1; }
  results[$1]+="$value "
  printf '%-32s %s %s\n' "$1" "$value" "$unit"
  grep -E '^(peak_gflops|peak_share|achieved_gflops)' <<<"$out" | sed 's/^/    /' || true
}
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, model $model, load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 1; r <= rounds; ++r)); do
  run "lockstep 1 rank x 2 threads" "$bench" train "${lockstep_args[@]}" --threads 2
  run "pytorch 1 rank x 2 threads" env OMP_NUM_THREADS=2 "$python" "$torch_script" \
    --ranks 1 --threads 2 "${torch_args[@]}"
  run "lockstep 2 ranks x 1 thread" mpiexec -n 2 "$bench" train "${lockstep_args[@]}" --threads 1
  run "pytorch DDP 2 ranks x 1 thread" env OMP_NUM_THREADS=1 "$python" "$torch_script" \
    --ranks 2 --threads 1 "${torch_args[@]}"
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
for pair in "lockstep 1 rank x 2 threads|pytorch 1 rank x 2 threads" \
            "lockstep 2 ranks x 1 thread|pytorch DDP 2 ranks x 1 thread"; do
  a=${pair%|*} b=${pair#*|}
  ma=$(median <<<"${results[$a]}") mb=$(median <<<"${results[$b]}")
  awk -v a="$a" -v ma="$ma" -v b="$b" -v mb="$mb" \
    'BEGIN { printf "median: %s %s, %s %s, ratio %.2f\n", a, ma, b, mb, ma / mb }'
done
