#!/usr/bin/env bash
# Lockstep as a library (DESIGN.md decision 17): the build installs into a fresh prefix; the
# installed programs answer --version with the project's version; the installed headers are
# self-consistent (every #include <lockstep/...> in them resolves inside the prefix, none is quoted,
# the private ones are absent) and each compiles on its own with lockstep.pc's flags; the version
# file accepts 0.2 and refuses 0.1 and 0.3; the example apps/examples/linear_regression builds as
# its own CMake project with find_package(Lockstep) and runs at 1, 2 and 4 ranks, and builds with
# its Makefile and pkg-config and runs at 2 ranks, learning w and b within 0.05; the example
# apps/examples/custom_layer (a layer of its own, then train_main) builds as its own CMake project
# with find_package(Lockstep COMPONENTS train_cli), lists layernorm in --help, trains 10 steps at 2
# ranks with a checkpoint and resumes from it to step 20, and builds with lockstep-train-cli.pc;
# `cpack -G DEB` makes a package holding the install under /usr that depends on the run-time Debian
# packages.
# The include check first runs on a fixture holding a dangling and a quoted include and must refuse
# it, so a broken pattern cannot pass silently.
# ctest sets LOCKSTEP_BIN (the apps build folder), LOCKSTEP_SRC and MPIEXEC.
set -u

bin="${LOCKSTEP_BIN:?LOCKSTEP_BIN must name the apps build folder}"
src="${LOCKSTEP_SRC:?LOCKSTEP_SRC must name the source tree}"
build=$(dirname "$bin")
mpiexec="${MPIEXEC:-mpiexec}"
. "$(dirname "$0")/helpers/e2e.sh"
e2e_require_apps lockstep-train lockstep-data lockstep-bench
e2e_require_commands cmake make pkg-config g++
e2e_workdir install
prefix=$work/prefix
example=$src/apps/examples/linear_regression
custom=$src/apps/examples/custom_layer
version=$(sed -nE 's/^project\(lockstep VERSION ([0-9.]+).*/\1/p' "$src/CMakeLists.txt")
[[ -n $version ]] || { echo "FAIL: no project(lockstep VERSION ...) in $src/CMakeLists.txt"; exit 1; }

# check_includes ROOT: prints each installed header under ROOT/include that includes a <lockstep/...>
# header missing from ROOT/include, or has a quoted include; sets `checked`. Non-zero if any.
check_includes() {
  local root=$1 file inc bad=0
  checked=0
  while IFS= read -r -d '' file; do
    while IFS= read -r inc; do
      checked=$((checked + 1))
      [[ -f $root/include/$inc ]] || { echo "${file#"$root"/}: includes <$inc>, not installed"; bad=1; }
    done < <(sed -nE 's/^#include <(lockstep\/[^>]+)>.*/\1/p' "$file")
    if grep -qE '^#include "' "$file"; then
      echo "${file#"$root"/}: a quoted include: $(grep -m1 -E '^#include "' "$file")"
      bad=1
    fi
  done < <(find "$root/include/lockstep" -name '*.h' -print0)
  return $bad
}

mkdir -p "$work/fixture/include/lockstep/comm" "$work/fixture/include/lockstep/base"
printf '#include <lockstep/base/gone.h>\n' >"$work/fixture/include/lockstep/comm/a.h"
printf '#include "runtime/base/b.h"\n' >"$work/fixture/include/lockstep/base/b.h"
out=$(check_includes "$work/fixture") && fail "the fixture's broken includes were accepted"
grep -qF "comm/a.h: includes <lockstep/base/gone.h>, not installed" <<<"$out" ||
  fail "the fixture's dangling include was not named: $out"
grep -qF "base/b.h: a quoted include" <<<"$out" || fail "the fixture's quoted include was not named: $out"

# ---- install ----
cmake --install "$build" --prefix "$prefix" >"$work/install.log" 2>&1 ||
  { cat "$work/install.log"; echo "FAIL: cmake --install $build"; exit 1; }
for f in bin/lockstep-train bin/lockstep-data bin/lockstep-bench lib/liblockstep_runtime.a \
         lib/liblockstep_kernels.a lib/cmake/Lockstep/LockstepConfig.cmake \
         lib/cmake/Lockstep/LockstepConfigVersion.cmake lib/cmake/Lockstep/LockstepTargets.cmake \
         lib/pkgconfig/lockstep.pc include/lockstep/version.h include/lockstep/comm/agree.h \
         include/lockstep/process/bootstrap.h include/lockstep/train/trainer.h \
         include/lockstep/kernels/dense.h lib/liblockstep_train_cli.a include/lockstep/train_cli.h \
         lib/cmake/Lockstep/LockstepTrainCliTargets.cmake lib/pkgconfig/lockstep-train-cli.pc; do
  [[ -e $prefix/$f ]] || fail "not installed: $f"
done
for f in base/cuda_check.h comm/nccl_watchdog.h kernels/onednn/util.h; do
  [[ -e $prefix/include/lockstep/$f ]] && fail "a private header is installed: include/lockstep/$f"
done
grep -qx "#define LOCKSTEP_VERSION_STRING \"$version\"" "$prefix/include/lockstep/version.h" ||
  fail "include/lockstep/version.h does not say $version"

# ---- --version ----
for app in lockstep-train lockstep-data lockstep-bench; do
  out=$(timeout 60 "$prefix/bin/$app" --version 2>&1)
  rc=$?
  [[ $rc -eq 0 ]] || fail "$app --version exited $rc: $out"
  [[ $(head -1 <<<"$out") == "$app $version" ]] || fail "$app --version's first line is not '$app $version': $out"
  grep -qE '^build: cuda=(yes|no) nccl=(yes|no) onednn=(yes|no) nvtx=(yes|no) blas=[A-Za-z0-9_.+-]+$' <<<"$out" ||
    fail "$app --version has no build line: $out"
done

# ---- headers: self-consistent, each compiles alone ----
check_includes "$prefix" >"$work/includes.out" || fail "installed headers do not resolve:
$(cat "$work/includes.out")"
headers=$(cd "$prefix/include" && find lockstep -name '*.h' | sort)
count=$(wc -l <<<"$headers")
[[ $count -gt 60 ]] || fail "only $count headers installed"
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
cflags=$(pkg-config --cflags lockstep) || fail "pkg-config --cflags lockstep failed"
mkdir -p "$work/tu"
while read -r h; do
  printf '#include <%s>\n#include <%s>\n' "$h" "$h" >"$work/tu/$(tr / _ <<<"${h%.h}").cpp"
done <<<"$headers"
# Each TU includes its header twice: the second catches a header without its include guard.
if ! (cd "$work/tu" && ls *.cpp | xargs -P 2 -I{} sh -c \
      "g++ -std=c++20 -fsyntax-only -Wall $cflags {} >{}.log 2>&1 || echo {}") >"$work/tu.failed"; then
  fail "the header compile loop failed"
fi
while read -r tu; do
  [[ -n $tu ]] && fail "$tu does not compile alone: $(head -5 "$work/tu/$tu.log")"
done <"$work/tu.failed"

# ---- the version file: 0.2 accepted, 0.1 and 0.3 refused ----
cat >"$work/version.cmake" <<EOS
include("$prefix/lib/cmake/Lockstep/LockstepConfigVersion.cmake")
message("compatible=\${PACKAGE_VERSION_COMPATIBLE}")
EOS
for want in "${version%.*}" 0.1 0.3; do
  IFS=. read -r major minor <<<"$want"
  got=$(cmake -DPACKAGE_FIND_VERSION="$want" -DPACKAGE_FIND_VERSION_MAJOR="$major" \
          -DPACKAGE_FIND_VERSION_MINOR="$minor" -DPACKAGE_FIND_VERSION_COUNT=2 \
          -P "$work/version.cmake" 2>&1)
  expect=FALSE
  [[ $want == "${version%.*}" ]] && expect=TRUE
  grep -q "compatible=$expect" <<<"$got" ||
    fail "find_package(Lockstep $want): expected compatible=$expect, got: $got"
done

# ---- the Debian package: the install under /usr, with its run-time Depends ----
if command -v dpkg-deb >/dev/null && [[ -f $build/CPackConfig.cmake ]]; then
  if (cd "$work" && cpack -G DEB -B "$work/deb" --config "$build/CPackConfig.cmake") >"$work/cpack.log" 2>&1; then
    deb=$(ls "$work"/deb/lockstep_"$version"_*.deb 2>/dev/null | head -1)
    depends=$(dpkg-deb -f "$deb" Depends 2>&1)
    for pkg in libopenmpi3 libhdf5-103-1 libboost-program-options1.74.0 zlib1g; do
      grep -qw -- "$pkg" <<<"$depends" || fail "the .deb does not depend on $pkg: $depends"
    done
    contents=$(dpkg-deb -c "$deb" 2>&1)
    for f in usr/bin/lockstep-train usr/lib/liblockstep_runtime.a usr/lib/cmake/Lockstep/LockstepConfig.cmake \
             usr/lib/pkgconfig/lockstep.pc usr/include/lockstep/comm/agree.h \
             usr/lib/liblockstep_train_cli.a usr/include/lockstep/train_cli.h \
             usr/lib/pkgconfig/lockstep-train-cli.pc; do
      grep -q -- " \./$f\$" <<<"$contents" || fail "the .deb does not hold /$f"
    done
  else
    fail "cpack -G DEB failed: $(tail -20 "$work/cpack.log")"
  fi
else
  echo "the Debian package is not checked: no dpkg-deb or no $build/CPackConfig.cmake"
fi

# run_example NAME BINARY NP: runs the example at NP ranks; it must exit 0 and say ok.
run_example() {
  local out rc
  out=$(timeout 120 "$mpiexec" -n "$3" --oversubscribe "$2" 2>&1)
  rc=$?
  [[ $rc -eq 0 ]] || { fail "$1 at $3 rank(s) exited $rc: $out"; return; }
  grep -q "^ok: largest error" <<<"$out" || fail "$1 at $3 rank(s) did not say ok: $out"
  grep -q "Lockstep $version, $3 rank(s)" <<<"$out" || fail "$1 at $3 rank(s): no version line: $out"
  echo "$1 -n $3: $(grep '^ok:' <<<"$out")"
}

# ---- the example with find_package(Lockstep) ----
if cmake -S "$example" -B "$work/cmake" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
     >"$work/cmake.log" 2>&1 && cmake --build "$work/cmake" >>"$work/cmake.log" 2>&1; then
  for np in 1 2 4; do run_example "cmake example" "$work/cmake/linear_regression" "$np"; done
else
  fail "the example does not configure and build with find_package(Lockstep): $(tail -30 "$work/cmake.log")"
fi

# ---- the example with its Makefile and pkg-config ----
mkdir -p "$work/make"
if (cd "$work/make" && make -f "$example/Makefile") >"$work/make.log" 2>&1; then
  run_example "make example" "$work/make/linear_regression" 2
else
  fail "the example does not build with make and pkg-config: $(tail -30 "$work/make.log")"
fi

# ---- the custom-layer example: find_package(Lockstep COMPONENTS train_cli), trained and resumed ----
custom_ran="not trained"
if cmake -S "$custom" -B "$work/custom" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
     >"$work/custom.log" 2>&1 && cmake --build "$work/custom" >>"$work/custom.log" 2>&1; then
  train=$work/custom/custom_train
  help=$("$train" --help 2>&1) || fail "the installed custom_train --help exits non-zero"
  tr -s ' \n' ' ' <<<"$help" | grep -q "lmhead, layernorm)" ||
    fail "the installed custom_train's --help does not list layernorm: $help"
  e2e_small_fashion_mnist "$prefix/bin/lockstep-data" "$work/fmnist.h5" 512 128
  case $? in
    0)
      args=(--data "$work/fmnist.h5" --model "flatten,layernorm,dense:32,relu,dense" --global-batch 64
            --threads 1 --progress lines --checkpoint-dir "$work/ckpt")
      out=$(timeout 120 "$mpiexec" -n 2 --oversubscribe "$train" "${args[@]}" --steps 10 2>&1)
      rc=$?
      [[ $rc -eq 0 ]] || fail "the installed custom_train's 10 steps at 2 ranks exit $rc: $out"
      [[ -f $work/ckpt/ckpt-000000010.h5 ]] || fail "custom_train wrote no checkpoint at step 10: $out"
      out=$(timeout 120 "$mpiexec" -n 2 --oversubscribe "$train" "${args[@]}" --steps 20 \
            --resume "$work/ckpt" 2>&1)
      rc=$?
      [[ $rc -eq 0 ]] || fail "the installed custom_train's resumed run exits $rc: $out"
      grep -q "resuming from .*ckpt-000000010.h5: step 10" <<<"$out" ||
        fail "the resumed custom_train does not say it resumes at step 10: $out"
      [[ -f $work/ckpt/ckpt-000000020.h5 ]] || fail "custom_train wrote no checkpoint at step 20: $out"
      custom_ran="trained 10 steps at 2 ranks and resumed to 20" ;;
    77) ;;
    *) fail "no small Fashion-MNIST file for the custom-layer example" ;;
  esac
else
  fail "the custom-layer example does not configure and build with find_package(Lockstep COMPONENTS train_cli): $(tail -30 "$work/custom.log")"
fi

# ---- the custom-layer example with lockstep-train-cli.pc ----
if (cd "$work" && g++ -std=c++20 -O1 $(pkg-config --cflags lockstep-train-cli) -o custom_pc \
      "$custom/custom_train.cpp" "$custom/layer_norm.cpp" $(pkg-config --libs lockstep-train-cli)) \
     >"$work/custom_pc.log" 2>&1; then
  "$work/custom_pc" --help 2>&1 | tr -s ' \n' ' ' | grep -q "lmhead, layernorm)" ||
    fail "custom_train built with lockstep-train-cli.pc does not list layernorm in --help"
else
  fail "the custom-layer example does not build with lockstep-train-cli.pc: $(tail -30 "$work/custom_pc.log")"
fi

[[ $failures -eq 0 ]] && echo "install_test: $count headers ($checked includes), the example at 1, 2, 4 ranks (CMake) and 2 (make), the custom-layer example built with CMake ($custom_ran) and pkg-config"
exit $((failures > 0))
