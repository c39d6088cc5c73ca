#!/usr/bin/env bash
# Packs what gpu-check.sh needs on a GPU machine that has CUDA, PyTorch and JAX but no Open MPI,
# HDF5, Boost, OpenBLAS or package registry (the machines the device tool lends), into DIR
# (default .device/, ignored by git), to be carried beside the checkout:
#   DIR/lockstep-pack.tar.xz  the CUDA build's apps and GPU test binaries (stripped); Open MPI and
#                             PMIx at their Debian paths (OPAL_PREFIX relocates them); every library
#                             those load on this machine, flattened into closure/, except glibc,
#                             libstdc++, libgcc_s and CUDA's own (driver, runtime, cuBLAS, NCCL,
#                             cuDNN), which the GPU machine's image provides
#   DIR/data/                 with --with-data only: Fashion-MNIST as lockstep-data writes it, usable
#                             as it is, 31 MB (deflate 9 saves 0.7 MB at ten times the time, and
#                             xz -6 of the raw IDX files still leaves 26 MB: it compresses poorly)
#   DIR/env.sh                sourced there: unpacks the tarball once, puts it first on PATH and
#                             LD_LIBRARY_PATH, finds CUDA, cuBLAS, NCCL and cuDNN in the image
#                             and prints what it chose
#   DIR/pack.txt              the commit and build it came from, and the sizes
# Prints the sizes with the checkout's (what travels: tracked and untracked files git does not
# ignore) and exits 1 when together they exceed 60 MiB (the tool carries at most 64 MiB).
#   bash scripts/gpu-pack.sh [--out DIR] [--with-data] [--with-sources] [--with-llmc SRC] [--no-build]
# The data set is half of what may travel, and only calls that need real rows (accuracy, reads from
# the file) need it: by default the pack has none, and gpu-check trains on synthetic rows.
# --with-llmc SRC adds llm.c's training sources (train_gpt2.cu, llmc/, dev/cuda/, Makefile; about
# 0.13 MiB) as DIR/llmc.tar.xz, from SRC, a checkout or a git directory (the fetch tool's mirror of
# karpathy/llm.c), for gpu-check's part llmc, with cuDNN's frontend and cuDNN's headers where this
# machine has them (0.4 MiB more), for llm.c's cuDNN attention.
# --with-sources adds the headers, CMake files and link-time pieces of MPI, HDF5, Boost, OpenBLAS
# and GoogleTest, so that the GPU machine can rebuild (env.sh then sets the CMake hints).
# The build: $LOCKSTEP_BUILD_DIR, else build/, first brought up to date by scripts/build.sh with
# LOCKSTEP_CUDA=ON; --no-build packs it as it is. Exit codes: 0 packed within budget, 1 over
# budget or a step failed, 2 bad arguments.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
here="$root/scripts"
out="$root/.device"
with_data=0
with_sources=0
llmc_src=""
build_first=1
while [[ $# -gt 0 ]]; do
  case $1 in
    --out) out=${2:?--out needs a folder}; shift 2 ;;
    --with-data) with_data=1; shift ;;
    --no-data) with_data=0; shift ;;  # the default; kept for old command lines
    --with-sources) with_sources=1; shift ;;
    --with-llmc) llmc_src=${2:?--with-llmc needs the llm.c checkout or git directory}; shift 2 ;;
    --no-build) build_first=0; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-pack: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
build=$(realpath -m "${LOCKSTEP_BUILD_DIR:-$root/build}")
budget_mib=60
die() { echo "gpu-pack: $*" >&2; exit 1; }

shopt -s nullglob
if [[ $build_first -eq 1 ]]; then
  echo "gpu-pack: bringing $build up to date (LOCKSTEP_CUDA=ON)"
  LOCKSTEP_CUDA=ON LOCKSTEP_BUILD_DIR="$build" bash "$here/build.sh"
fi
gpu_tests=("$build"/tests/*_gpu_test "$build"/tests/*_gpu_mpi_test)
[[ ${#gpu_tests[@]} -gt 0 ]] || die "$build has no *_gpu_test binary: not a CUDA build"
apps=("$build"/apps/lockstep-train "$build"/apps/lockstep-bench "$build"/apps/lockstep-data
      "$build"/apps/lockstep-generate "$build"/apps/lockstep-predict)
for a in "${apps[@]}"; do [[ -x "$a" ]] || die "missing $a"; done

stage=$(mktemp -d "${TMPDIR:-/tmp}/gpu-pack-XXXXXX")
trap 'rm -rf "$stage"' EXIT
tree="$stage/lockstep-pack"
mkdir -p "$tree/build/apps" "$tree/build/tests" "$tree/closure"

# ---- the programs, stripped (the CUDA fat binaries are loaded sections and survive) ----
for f in "${apps[@]}"; do strip --strip-all -o "$tree/build/apps/$(basename "$f")" "$f"; done
for f in "${gpu_tests[@]}"; do strip --strip-all -o "$tree/build/tests/$(basename "$f")" "$f"; done
# The CPU helper that writes a GPT's initial parameters for PyTorch (gpu-check part gpt-loss).
[[ -x "$build/tests/gpt_reference_dump" ]] &&
  strip --strip-all -o "$tree/build/tests/gpt_reference_dump" "$build/tests/gpt_reference_dump"

# ---- Open MPI and PMIx, every file of their run-time packages at its Debian path ----
# Debian's defaults (/etc/openmpi/openmpi-mca-params.conf: no UCX, OFI or openib) come along and
# env.sh names them, since sysconfdir is not relocated by OPAL_PREFIX.
mpi_packages=(openmpi-bin openmpi-common libopenmpi3 libpmix2)
dpkg -L "${mpi_packages[@]}" >/dev/null 2>&1 || die "needs the Debian packages ${mpi_packages[*]}"
dpkg -L "${mpi_packages[@]}" |
  grep -vE '^/usr/share/(doc|man|lintian|bug)/|^/etc/openmpi/openmpi-totalview' |
  while read -r f; do [[ -L "$f" || -f "$f" ]] && printf '%s\n' "$f"; done |
  (cd / && xargs -d '\n' cp -a --parents -t "$tree")
# update-alternatives links that unpacking a package does not make
ln -sf orterun "$tree/usr/bin/mpirun"
ln -sf orterun "$tree/usr/bin/mpiexec"
# Interconnect components (InfiniBand, OFI, UCX, PSM: off in Debian's defaults, and one machine
# needs only shared memory) and the OpenSHMEM, Fortran and Java bindings: nothing here uses them,
# and they would bring their libraries along.
unused='lib(ucp|ucs|uct|ucm|fabric|psm2|psm_infinipath|ibverbs|rdmacm|oshmem)\.so'
for f in "$tree"/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/*.so; do
  if [[ $(ldd "$f" 2>/dev/null) =~ $unused ]]; then rm "$f"; fi
done
find "$tree/usr" \( -name 'liboshmem.so*' -o -name 'libmca_common_ucx.so*' -o -name 'libmca_common_verbs.so*' \
  -o -name 'libmca_common_ofi.so*' -o -name 'libmpi_mpifh.so*' -o -name 'libmpi_usempi*.so*' \
  -o -name 'libmpi_java.so*' \) -delete
rm -f "$tree"/usr/bin/osh* "$tree"/usr/bin/shmem*
# a link to an absolute path would lead out of the tree on the GPU machine
while read -r link; do
  target=$(readlink -f "$link")
  if [[ -e "$tree$target" ]]; then ln -sfr "$tree$target" "$link"; else cp -L --remove-destination "$target" "$link"; fi
done < <(find "$tree" -type l -lname '/*')

# ---- the shared-library closure of every program and library in the tree, as ldd finds it ----
# System libraries every Linux image has (glibc, the C++ runtime) and CUDA's, which must match
# the GPU machine's driver and toolkit, stay out; CUDA's names go to env.sh, which looks for them.
provided='^(linux-vdso|ld-linux-x86-64|libc|libm|libmvec|libpthread|libdl|librt|libutil|libresolv|libanl|libnsl|libBrokenLocale|libstdc\+\+|libgcc_s)\.so'
cuda_family='^lib(cuda|cudart|cublas|cublasLt|nccl|cudnn|nvrtc|nvJitLink|nvToolsExt|nvidia-ml|cufft|curand|cusolver|cusparse)\.so'
elfs=$(find "$tree" -type f -exec sh -c 'for f; do [ "$(head -c 4 "$f")" = "$(printf "\177ELF")" ] && echo "$f"; done' sh {} +)
cuda_needs=()
missing=()
while read -r name path; do
  if [[ $name =~ $provided ]]; then continue; fi
  if [[ $name =~ $cuda_family || $path == /usr/local/cuda* ]]; then cuda_needs+=("$name"); continue; fi
  if [[ $path == "not" ]]; then missing+=("$name"); continue; fi
  [[ -e "$tree$path" || -e "$tree/usr$path" || -e "$tree/closure/$name" ]] && continue
  cp -L "$path" "$tree/closure/$name"
done < <(printf '%s\n' "$elfs" | xargs -d '\n' ldd 2>/dev/null |
           awk '$2 == "=>" && $3 ~ /^\// {print $1, $3} $2 == "=>" && $3 == "not" {print $1, "not"}' | sort -u)
[[ ${#missing[@]} -eq 0 ]] || die "libraries not found on this machine: ${missing[*]}"
mapfile -t cuda_needs < <(printf '%s\n' "${cuda_needs[@]}" | sort -u)
# Loaded at run time, not linked, so ldd cannot list it: cuDNN's fused attention compiles its
# engines through NVRTC (without it cuDNN finds no engine and the attention falls back to the flash
# kernels, a refusal printed once).
cuda_wants=()
if grep -q '^CUDNN_FRONTEND_INCLUDE_DIR:PATH=/' "$build/CMakeCache.txt" 2>/dev/null; then
  # the soname of the toolkit built against (libnvrtc.so.13 for CUDA 13)
  nvrtc=$(cd "${CUDA_HOME:-/usr/local/cuda}/lib64" 2>/dev/null && ls libnvrtc.so.[0-9]* 2>/dev/null | head -1)
  cuda_wants+=("${nvrtc:-libnvrtc.so.13}")
fi

if [[ $with_sources -eq 1 ]]; then bash "$here/gpu-pack-sources.sh" "$build" "$tree"; fi

# ---- the pack ----
rm -rf "$out"
mkdir -p "$out"
out=$(cd "$out" && pwd)
# xz -3: a third smaller than gzip (OpenBLAS holds kernels for every x86 CPU), at a moderate cost.
tar -C "$stage" -cf - lockstep-pack | xz -3 -T0 >"$out/lockstep-pack.tar.xz"
pack_id="$(date -u +%Y%m%dT%H%M%S)-$$"
commit=$(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)
sed -e "s|@PACK_ID@|$pack_id|" -e "s|@CUDA_NEEDS@|${cuda_needs[*]}|" -e "s|@CUDA_WANTS@|${cuda_wants[*]}|" -e "s|@COMMIT@|$commit|" \
    -e "s|@SOURCES@|$with_sources|" "$here/gpu-pack-env.sh" >"$out/env.sh"

# llm.c's sources (the peer of issue 36's GPT-2 124M row), as they are, for gpu-check part llmc to
# build there: a git directory (a fetched mirror) or a checkout. Beside them, where this machine
# has them, cuDNN's frontend headers (header-only, in cudnn-frontend/include, where llm.c's Makefile
# looks with USE_CUDNN=1) and cuDNN's own headers (cudnn/include), so that llm.c can be built with
# its cuDNN flash attention, as its record runs are, against the GPU machine's libcudnn.
if [[ -n $llmc_src ]]; then
  llmc_paths=(train_gpt2.cu llmc dev/cuda Makefile LICENSE)
  llmc_stage=$(mktemp -d)
  if git -C "$llmc_src" rev-parse --git-dir >/dev/null 2>&1; then
    git -C "$llmc_src" archive HEAD "${llmc_paths[@]}" | tar -x -C "$llmc_stage" ||
      die "could not archive llm.c from $llmc_src"
  else
    tar -C "$llmc_src" -cf - "${llmc_paths[@]}" | tar -x -C "$llmc_stage" ||
      die "could not pack llm.c from $llmc_src"
  fi
  frontend=${CUDNN_FRONTEND_HOME:-/usr/local/lib/cudnn-frontend}/include
  cudnn_headers=("${CUDA_HOME:-/usr/local/cuda}"/include/cudnn*.h)
  if [[ -f $frontend/cudnn_frontend.h && -f ${cudnn_headers[0]} ]]; then
    mkdir -p "$llmc_stage/cudnn-frontend" "$llmc_stage/cudnn/include"
    cp -r "$frontend" "$llmc_stage/cudnn-frontend/include"
    cp "${cudnn_headers[@]}" "$llmc_stage/cudnn/include/"
  else
    echo "gpu-pack: no cuDNN frontend or cuDNN headers here: llm.c will be built without cuDNN" >&2
  fi
  tar -C "$llmc_stage" -cf - . | xz -3 >"$out/llmc.tar.xz" || die "could not pack llm.c"
  rm -rf "$llmc_stage"
fi

if [[ $with_data -eq 1 ]]; then
  mkdir -p "$out/data"
  "$build/apps/lockstep-data" fashion-mnist --out "$out/data/fashion-mnist.h5" >/dev/null ||
    die "could not convert Fashion-MNIST (apt-get install dataset-fashion-mnist, or leave out --with-data)"
fi

# ---- sizes: the pack, its data and the checkout travel together ----
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
bytes_of() { { find "$@" -type f -printf '%s\n' 2>/dev/null || true; } | awk '{ s += $1 } END { print s + 0 }'; }
pack_bytes=$(bytes_of "$out/lockstep-pack.tar.xz" "$out/env.sh" "$out/llmc.tar.xz")
data_bytes=$(bytes_of "$out/data")
if git -C "$root" rev-parse --git-dir >/dev/null 2>&1; then
  checkout_bytes=$(cd "$root" && git ls-files -z -co --exclude-standard |
                   xargs -0 -r stat -c '%s' 2>/dev/null | awk '{ s += $1 } END { print s + 0 }')
else
  checkout_bytes=$(bytes_of "$root" -not -path "$root/build*" -not -path "$root/.device/*")
fi
unpacked_bytes=$(bytes_of "$tree")
total=$((pack_bytes + data_bytes + checkout_bytes))
{
  echo "pack $pack_id from commit $commit, build $build"
  echo "binaries: ${#apps[@]} apps, ${#gpu_tests[@]} GPU tests; from the GPU machine: ${cuda_needs[*]:-nothing}"
  echo "sizes: pack $(mib "$pack_bytes") ($(mib "$unpacked_bytes") unpacked), data $(mib "$data_bytes"), checkout $(mib "$checkout_bytes"); together $(mib "$total") of $budget_mib MiB"
} | tee "$out/pack.txt"
echo "carry: $(realpath --relative-to="$root" "$out" 2>/dev/null || echo "$out")"
if [[ $total -gt $((budget_mib * 1048576)) ]]; then
  die "over the $budget_mib MiB budget: leave the data out (no --with-data) or the sources (no --with-sources)"
fi
