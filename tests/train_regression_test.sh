#!/usr/bin/env bash
# Linear regression in the tutorial's setting, end to end: lockstep-data regression writes 100
# samples per rank with 5 features and noise 0.1 (the true w and b are attributes of the file);
# lockstep-train fits the linear model with full-batch SGD at lr 0.05 on 1, 2 and 4 ranks and
# prints how far the learned w and b are from the truth. Both must be within 0.05.
# ctest sets LOCKSTEP_BIN (the apps build folder) and MPIEXEC.
set -u

bin="${LOCKSTEP_BIN:?LOCKSTEP_BIN must name the apps build folder}"
mpiexec="${MPIEXEC:-mpiexec}"
for tool in "$bin/lockstep-train" "$bin/lockstep-data"; do
  [[ -x $tool ]] || { echo "skipped: $tool is not built"; exit 77; }
done

. "$(dirname "$0")/helpers/e2e.sh"
e2e_workdir regression

# value KEY: the number after "KEY=" in $out.
value() { sed -n "s/^$1=//p" <<<"$out" | tail -1; }
within() { awk -v v="$1" -v lim="$2" 'BEGIN { exit !(v != "" && v + 0 <= lim + 0) }'; }

for np in 1 2 4; do
  rows=$((100 * np))
  data="$work/regression-$np.h5"
  if ! "$bin/lockstep-data" regression --out "$data" --samples "$rows" --features 5 --noise 0.1 \
      --seed 3 >/dev/null 2>&1; then
    fail "lockstep-data regression could not write $data"
    continue
  fi
  out=$(timeout 300 "$mpiexec" -n "$np" --oversubscribe "$bin/lockstep-train" --data "$data" \
        --model linear --optimizer sgd --lr 0.05 --global-batch "$rows" --epochs 300 \
        --progress none 2>&1)
  rc=$?
  w=$(value w_max_error)
  b=$(value b_error)
  mse=$(value test_mse)
  echo "$np rank(s), $rows samples: w_max_error=$w b_error=$b test_mse=$mse"
  [[ $rc -eq 0 ]] || { fail "$np ranks: exit $rc"; echo "$out" | tail -20; continue; }
  within "$w" 0.05 || fail "$np ranks: learned w is $w from the truth (limit 0.05)"
  within "$b" 0.05 || fail "$np ranks: learned b is $b from the truth (limit 0.05)"
  # The noise variance is 0.01: a fitted model's test MSE must be near it, not near Var(y).
  within "$mse" 0.03 || fail "$np ranks: test_mse $mse, expected about 0.01"
done

[[ $failures -eq 0 ]] && echo "train_regression_test: all passed"
exit $((failures > 0))
