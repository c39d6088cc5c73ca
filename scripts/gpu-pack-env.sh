# The environment of a Lockstep pack: scripts/gpu-pack.sh copies this file into the pack as env.sh
# with the @...@ fields filled in. Source it from bash on the GPU machine, in the checkout:
#   . .device/env.sh
# It unpacks lockstep-pack.tar.xz once into ${TMPDIR:-/tmp}/lockstep-pack-ID (ID is new with every
# pack, so a stale tree is never used), then puts the pack's Open MPI first on PATH and its
# libraries first on LD_LIBRARY_PATH, followed by the CUDA runtime, cuBLAS, NCCL and cuDNN of the
# machine's image: its CUDA toolkit first, then its Python environment's nvidia/*/lib wheels (where
# such images keep NCCL). It prints each CUDA library it chose, a warning for each it cannot find,
# and every library a packed program still cannot resolve.
# Exports LOCKSTEP_PACK_ROOT (the unpacked tree), LOCKSTEP_PACK_BUILD (its apps/ and tests/),
# LOCKSTEP_PACK_DATA (Fashion-MNIST, when packed), LOCKSTEP_SYSTEM_LD_LIBRARY_PATH (the machine's
# own, for programs such as python3 that must not load the pack's libraries) and MPIEXEC.
# Returns non-zero, leaving the shell open, when the pack cannot be unpacked.
_lp_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
_lp_root=${TMPDIR:-/tmp}/lockstep-pack-@PACK_ID@
echo "env.sh: pack @PACK_ID@, commit @COMMIT@, unpacked in $_lp_root" >&2
# xz, else Python's lzma (an image may lack xz-utils, never python3)
_lp_unxz() {
  if command -v xz >/dev/null; then xz -dc "$1"; else
    python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), sys.stdout.buffer)' "$1"
  fi
}
if [[ ! -f $_lp_root/.unpacked ]]; then
  if ! { rm -rf "$_lp_root" && mkdir -p "$_lp_root" &&
         _lp_unxz "$_lp_here/lockstep-pack.tar.xz" | tar -C "$_lp_root" --strip-components=1 -xf - &&
         touch "$_lp_root/.unpacked"; }; then
    echo "env.sh: could not unpack $_lp_here/lockstep-pack.tar.xz into $_lp_root" >&2
    return 1
  fi
fi

# Where the image keeps CUDA, in order of preference (the toolkit's runtime is the one its nvcc
# builds against). The Python environment is asked before LD_LIBRARY_PATH changes.
_lp_py=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null)
_lp_dirs=()
for _lp_d in ${CUDA_HOME:+"$CUDA_HOME/lib64"} /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
             /usr/local/cuda/lib /usr/local/cuda-*/lib64 ${_lp_py:+"$_lp_py"/nvidia/*/lib} \
             /opt/*/.venv/lib/python3*/site-packages/nvidia/*/lib \
             /usr/local/lib/python3*/dist-packages/nvidia/*/lib; do
  [[ -d $_lp_d ]] || continue
  _lp_d=$(realpath "$_lp_d")
  [[ " ${_lp_dirs[*]} " == *" $_lp_d "* ]] || _lp_dirs+=("$_lp_d")
done
# The libraries the pack's programs need, then (after "want:") those they load at run time where
# the image has them (NVRTC, for cuDNN's fused attention): on the path when found; a warning for a
# missing need, a note for a missing want.
_lp_cuda=""
_lp_want=0
for _lp_l in @CUDA_NEEDS@ want: @CUDA_WANTS@; do
  if [[ $_lp_l == want: ]]; then _lp_want=1; continue; fi
  _lp_f=""
  for _lp_d in "${_lp_dirs[@]}"; do
    [[ -e $_lp_d/$_lp_l ]] && { _lp_f=$_lp_d/$_lp_l; break; }
  done
  if [[ -n $_lp_f ]]; then
    echo "env.sh: $_lp_l -> $_lp_f" >&2
    [[ ":$_lp_cuda:" == *":${_lp_f%/*}:"* ]] || _lp_cuda=$_lp_cuda:${_lp_f%/*}
  elif _lp_f=$(ldconfig -p 2>/dev/null | awk -v l="$_lp_l" '$1 == l { print $NF; exit }') && [[ -n $_lp_f ]]; then
    echo "env.sh: $_lp_l -> $_lp_f (the system's loader cache)" >&2
  elif [[ $_lp_want == 1 ]]; then
    echo "env.sh: note: $_lp_l is not in this image: cuDNN's fused attention" \
         "(LOCKSTEP_CUDA_ATTENTION=cudnn) will find no engine and fall back to the flash kernels" >&2
  else
    _lp_f=$(for _lp_d in "${_lp_dirs[@]}"; do ls "$_lp_d/${_lp_l%%.so*}".so.* 2>/dev/null; done | head -3 | tr '\n' ' ')
    echo "env.sh: WARNING: $_lp_l, which the pack's programs need, is not in this image's CUDA toolkit" \
         "or Python environment (searched: ${_lp_dirs[*]:-nothing found})${_lp_f:+; other versions: $_lp_f}." \
         "Programs on the GPU will fail to start: build here instead (scripts/gpu-check.sh build-gpu)." >&2
  fi
done

_lp_usr=$_lp_root/usr
export LOCKSTEP_PACK_ROOT=$_lp_root LOCKSTEP_PACK_BUILD=$_lp_root/build
[[ -f $_lp_here/data/fashion-mnist.h5 ]] && export LOCKSTEP_PACK_DATA=$_lp_here/data/fashion-mnist.h5
export LOCKSTEP_SYSTEM_LD_LIBRARY_PATH=${LOCKSTEP_SYSTEM_LD_LIBRARY_PATH-${LD_LIBRARY_PATH-}}
export LD_LIBRARY_PATH=$_lp_usr/lib/x86_64-linux-gnu/openmpi/lib:$_lp_usr/lib/x86_64-linux-gnu:$_lp_root/closure$_lp_cuda${LOCKSTEP_SYSTEM_LD_LIBRARY_PATH:+:$LOCKSTEP_SYSTEM_LD_LIBRARY_PATH}
[[ ":$PATH:" == *":$_lp_usr/bin:"* ]] || export PATH=$_lp_usr/bin:$PATH
# Open MPI and PMIx find their components and help files under these prefixes; Debian's MCA
# defaults live in /etc, which OPAL_PREFIX does not move.
export OPAL_PREFIX=$_lp_usr PMIX_INSTALL_PREFIX=$_lp_usr/lib/x86_64-linux-gnu/pmix2
export PMIX_MCA_mca_base_component_path=$_lp_usr/lib/x86_64-linux-gnu/pmix2/lib/pmix
export OMPI_MCA_mca_base_param_files=$_lp_root/etc/openmpi/openmpi-mca-params.conf
# A program started without mpiexec (an MPI singleton) would fork orted from Debian's prefix.
export OMPI_MCA_ess_singleton_isolated=1 MPIEXEC=$_lp_usr/bin/orterun
# The pack serves one machine: mpiexec starts its ranks there, without ssh (a bare image has none,
# and Open MPI's default launcher refuses to start without it).
export OMPI_MCA_plm=isolated
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

if [[ @SOURCES@ == 1 && -d $_lp_root/dev ]]; then
  # shellcheck source=/dev/null
  . "$_lp_root/dev/cmake-hints.sh"
fi

_lp_f=$(cd "$_lp_root/build" && ldd apps/* tests/* 2>&1 | awk '/^[^ \t]/ { p = $1 } /not found/ { print p, $1 }')
[[ -z $_lp_f ]] || printf 'env.sh: WARNING: not found: %s\n' "$_lp_f" >&2
unset -f _lp_unxz
unset _lp_here _lp_root _lp_py _lp_dirs _lp_d _lp_cuda _lp_l _lp_f _lp_usr
