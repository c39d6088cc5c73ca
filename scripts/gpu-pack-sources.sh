#!/usr/bin/env bash
# gpu-pack.sh --with-sources: adds to a pack tree what the GPU machine needs to build Lockstep
# itself with its own nvcc, 16 cores and CMake (from its Python environment), so that a fix there
# is rebuilt in a minute instead of here and carried again:
#  - every header of MPI, HDF5, Boost, OpenBLAS, GoogleTest and zlib the build's dependency files
#    name (the Boost headers Lockstep uses, not all of Boost), at its Debian path under usr/;
#  - the CMake package files, link-time .so names (pointing at the pack's libraries) and
#    GoogleTest's static libraries of those -dev packages, and Open MPI's compiler wrappers.
# env.sh then points CMAKE_PREFIX_PATH, CPATH and NCCL_HOME at them (dev/cmake-hints.sh).
#   bash scripts/gpu-pack-sources.sh BUILD_DIR PACK_TREE
set -euo pipefail
build=${1:?usage: gpu-pack-sources.sh BUILD_DIR PACK_TREE}
tree=${2:?usage: gpu-pack-sources.sh BUILD_DIR PACK_TREE}
dev_packages='^(libopenmpi-dev|libhdf5-dev|libboost[a-z-]*1\.[0-9]+-dev|libopenblas[a-z0-9-]*-dev|libgtest-dev|libgmock-dev|googletest|zlib1g-dev)(:amd64)?$'
mkdir -p "$tree/dev"

# ---- headers: those the build included, from packages the GPU machine lacks ----
mapfile -t used < <(find "$build" -name '*.o.d' -print0 | xargs -0 -r cat | tr ' \\' '\n\n' |
  grep -E '^/usr/' | grep -vE '^/usr/local/cuda|^/usr/include/c\+\+/|^/usr/lib/gcc/' | sort -u)
[[ ${#used[@]} -gt 0 ]] || { echo "gpu-pack: no dependency files (*.o.d) in $build" >&2; exit 1; }
declare -A owner
while IFS= read -r line; do owner[${line#*: }]=${line%%: *}; done < <(
  printf '%s\n' "${used[@]}" | xargs -d '\n' readlink -f | xargs -d '\n' dpkg -S 2>/dev/null)
for f in "${used[@]}"; do
  pkg=${owner[$(readlink -f "$f")]:-}
  [[ ${pkg%%:*} =~ $dev_packages ]] || continue
  mkdir -p "$tree$(dirname "$f")"
  cp -L "$f" "$tree$f"
done

# ---- CMake package files, link names and wrappers of the -dev packages ----
mapfile -t packages < <(dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' | awk '$1 == "ii" { print $2 }' | grep -E "$dev_packages")
dpkg -L "${packages[@]}" |
  grep -E '/cmake/|\.so$|/libgtest[_a-z]*\.a$|/libgmock[_a-z]*\.a$|/share/openmpi/.*-wrapper-data\.txt$|/bin/mpic(c|xx|\+\+)\.openmpi$' |
  while read -r f; do [[ -L "$f" || -f "$f" ]] && printf '%s\n' "$f"; done |
  (cd / && xargs -d '\n' cp -a --parents -t "$tree")
# Open MPI's wrappers name this folder; nothing Lockstep includes lives there.
mkdir -p "$tree/usr/lib/x86_64-linux-gnu/openmpi/include/openmpi"
# update-alternatives names: the MPI compilers, and OpenBLAS as the linker looks for it
ln -sfr "$tree/closure/libopenblas.so.0" "$tree/usr/lib/x86_64-linux-gnu/libopenblas.so"
ln -sf mpicc.openmpi "$tree/usr/bin/mpicc"
ln -sf mpicxx.openmpi "$tree/usr/bin/mpicxx"
# A link-time name (libhdf5_serial.so) points at its library: in the pack's closure, by soname.
while read -r link; do
  [[ $(readlink -f "$link") == "$tree"/* && -e $link ]] && continue
  target=$(readlink -f "${link#"$tree"}" 2>/dev/null) || target=""
  soname=$([[ -f $target ]] && objdump -p "$target" 2>/dev/null | awk '$1 == "SONAME" { print $2 }') || true
  if [[ -n $soname && -e "$tree/closure/$soname" ]]; then
    ln -sfr "$tree/closure/$soname" "$link"
  else
    rm "$link"   # a library Lockstep does not link (the HDF5 C++ and Fortran ones, ...)
  fi
done < <(find "$tree/usr" -type l -name '*.so')

# CMake package files name libraries by full path at their Debian place (Boost's name
# libboost_program_options.so.1.74.0): every library of the closure is linked there too.
for f in "$tree"/closure/*; do
  [[ -e "$tree/usr/lib/x86_64-linux-gnu/${f##*/}" ]] || ln -sr "$f" "$tree/usr/lib/x86_64-linux-gnu/${f##*/}"
done

# ---- the hints env.sh sources (it defines _lp_root, _lp_cuda) ----
cat >"$tree/dev/cmake-hints.sh" <<'HINTS'
# Sourced by env.sh in a pack made with --with-sources: CMake, the compilers and the linker find
# the pack's headers and libraries; NCCL comes from the image (a wheel ships libnccl.so.2 alone,
# so the link name is made here).
export CMAKE_PREFIX_PATH=$_lp_root/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
export CPATH=$_lp_root/usr/include:$_lp_root/usr/include/x86_64-linux-gnu${CPATH:+:$CPATH}
export LIBRARY_PATH=$_lp_root/usr/lib/x86_64-linux-gnu:$_lp_root/closure${LIBRARY_PATH:+:$LIBRARY_PATH}
for _lp_d in ${_lp_cuda//:/ }; do
  if [[ -e $_lp_d/libnccl.so.2 && -e $_lp_d/../include/nccl.h ]]; then
    mkdir -p "$_lp_root/dev/nccl/lib"
    ln -sfn "$(cd "$_lp_d/../include" && pwd)" "$_lp_root/dev/nccl/include"
    ln -sf "$_lp_d/libnccl.so.2" "$_lp_root/dev/nccl/lib/libnccl.so"
    export NCCL_HOME=$_lp_root/dev/nccl
    echo "env.sh: NCCL_HOME=$NCCL_HOME (nccl.h and libnccl.so from $_lp_d/..)" >&2
    break
  fi
done
if ! command -v make >/dev/null && command -v ninja >/dev/null; then export CMAKE_GENERATOR=Ninja; fi
HINTS
