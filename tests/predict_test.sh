#!/usr/bin/env bash
# lockstep-predict, end to end on the CPU, for the three kinds of data:
#  - the CNN on a small Fashion-MNIST test split: logits and predicted classes at 1 and 3 ranks are
#    the same bits, in input order (their accuracy against the file's labels is the test_accuracy
#    lockstep-train --eval-only prints for that checkpoint), with the model and step as attributes;
#  - an MLP on a regression split: predictions whose mean squared error is --eval-only's test_mse;
#    with --batch 1000000000 (far above the rows: cut to them) at 2 ranks, the same bits as with
#    the default --batch 256 (also above them);
#  - a small GPT on a byte corpus: predicted next bytes at every position (their accuracy is
#    --eval-only's), all logits, and with --top 3 the three most likely bytes with their softmax
#    probabilities, which must be the logits' own;
#  - only the inputs are read and the checkpoint decides what is written: the regression split's
#    inputs alone, or with integer labels, give the regression predictions; a NaN input is refused
#    naming its row;
#  - refusals, exit 2 and no file: an output that exists (left as it was; at 2 ranks printed once,
#    without MPI_Abort), an empty --out, a checkpoint whose model
#    cannot take the rows, a missing group, --batch 0, --top on image data.
# ctest sets LOCKSTEP_BIN (the apps build folder) and MPIEXEC.
set -u

bin="${LOCKSTEP_BIN:?LOCKSTEP_BIN must name the apps build folder}"
mpiexec="${MPIEXEC:-mpiexec}"
. "$(dirname "$0")/helpers/e2e.sh"
e2e_require_apps lockstep-train lockstep-data lockstep-predict
/usr/bin/python3 -c "import h5py, numpy" 2>/dev/null ||
  { echo "skipped: /usr/bin/python3 cannot import h5py and numpy (python3-h5py)"; exit 77; }

e2e_workdir predict
cd "$work" || exit 1
predict() {  # predict NP ARGS...: lockstep-predict at NP ranks; output in $out, status in $rc
  local np=$1
  shift
  out=$(timeout 120 "$mpiexec" -n "$np" --oversubscribe "$bin/lockstep-predict" --threads 1 "$@" 2>&1)
  rc=$?
}
eval_figure() {  # eval_figure KEY DATA MODEL CKPT ARGS...: the figure --eval-only prints
  local key=$1 data=$2 model=$3 ckpt=$4
  shift 4
  timeout 120 "$bin/lockstep-train" --data "$data" --model "$model" --resume "$ckpt" --eval-only \
    "$@" 2>&1 | grep -oE "^$key=[0-9.]+" | cut -d= -f2
}
py() { timeout 120 /usr/bin/python3 -c "$1"; }

# ---- classification: the CNN ----
e2e_small_fashion_mnist "$bin/lockstep-data" fmnist.h5 512 100
case $? in
  0)
    out=$(timeout 120 "$mpiexec" -n 2 --oversubscribe "$bin/lockstep-train" --data fmnist.h5 \
            --model cnn --global-batch 32 --threads 1 --steps 8 --progress none \
            --checkpoint-dir cnn_ckpt 2>&1) || fail "the CNN's training exits $?: $out"
    predict 1 --checkpoint cnn_ckpt --data fmnist.h5 --out cnn1.h5 --batch 16
    [[ $rc -eq 0 ]] || fail "predict at 1 rank exits $rc: $out"
    predict 3 --checkpoint cnn_ckpt --data fmnist.h5 --out cnn3.h5 --batch 16
    [[ $rc -eq 0 ]] || fail "predict at 3 ranks exits $rc: $out"
    echo "$out"
    want=$(eval_figure test_accuracy fmnist.h5 cnn cnn_ckpt --global-batch 32)
    got=$(py "
import h5py, numpy as np
a, b = h5py.File('cnn1.h5'), h5py.File('cnn3.h5')
assert a['logits'].shape == (100, 10) and a['predicted'].shape == (100,), a['logits'].shape
assert np.array_equal(a['logits'][...], b['logits'][...]), 'logits differ between 1 and 3 ranks'
assert np.array_equal(a['predicted'][...], b['predicted'][...]), 'classes differ'
assert np.array_equal(a['predicted'][...], a['logits'][...].argmax(1)), 'predicted is not argmax'
assert a.attrs['step'] == 8 and a.attrs['rows'] == 100, dict(a.attrs)
assert a.attrs['model'].startswith('conv3x3:32'), a.attrs['model']
labels = h5py.File('fmnist.h5')['test']['labels'][...]
print(f\"{(a['predicted'][...] == labels).mean():.4f}\")") ||
      fail "the CNN's predictions: $got"
    [[ -n $want && "$got" == "$want" ]] &&
      echo "ok: CNN predictions at 1 and 3 ranks are the same bits; their accuracy $got is --eval-only's" ||
      fail "the CNN's predicted accuracy $got, --eval-only's $want" ;;
  77) echo "the CNN part is skipped: no Fashion-MNIST IDX files (dataset-fashion-mnist)" ;;
  *) fail "no small Fashion-MNIST file" ;;
esac

# ---- regression: an MLP ----
"$bin/lockstep-data" regression --out reg.h5 --samples 300 --features 3 --seed 2 >/dev/null ||
  fail "lockstep-data regression"
out=$(timeout 120 "$bin/lockstep-train" --data reg.h5 --model mlp:8 --global-batch 32 --steps 20 \
        --progress none --checkpoint-dir reg_ckpt 2>&1) || fail "the MLP's training exits $?: $out"
predict 2 --checkpoint reg_ckpt --data reg.h5 --out reg_pred.h5 --batch 7
[[ $rc -eq 0 ]] || fail "predict on regression exits $rc: $out"
want=$(eval_figure test_mse reg.h5 mlp:8 reg_ckpt --global-batch 32)
got=$(py "
import h5py, numpy as np
p = h5py.File('reg_pred.h5')['predictions'][...]
y = h5py.File('reg.h5')['test']['y'][...].reshape(-1, 1)
assert p.shape == y.shape, (p.shape, y.shape)
print(f'{float(np.mean((p.astype(np.float64) - y) ** 2)):.6f}')") || fail "the MLP's predictions: $got"
[[ -n $want && "$got" == "$want" ]] && echo "ok: regression predictions' MSE $got is --eval-only's" ||
  fail "the MLP's predicted MSE $got, --eval-only's $want"
# A --batch far above the test split's 60 rows is cut to them: one batch of every row, as the
# default --batch 256 gives, so the same bits (before, buffers were sized by --batch: bad_alloc).
predict 2 --checkpoint reg_ckpt --data reg.h5 --out reg_256.h5
[[ $rc -eq 0 ]] || fail "predict with the default --batch exits $rc: $out"
predict 2 --checkpoint reg_ckpt --data reg.h5 --out reg_big.h5 --batch 1000000000
if [[ $rc -ne 0 ]]; then
  fail "predict with --batch 1000000000 exits $rc: $out"
else
  got=$(py "
import h5py
a, b = h5py.File('reg_256.h5')['predictions'][...], h5py.File('reg_big.h5')['predictions'][...]
print('same' if a.shape == b.shape and a.tobytes() == b.tobytes() else f'{a.shape} {b.shape} differ')")
  [[ "$got" == same ]] &&
    echo "ok: --batch 1000000000 at 2 ranks gives the default --batch's predictions, bit for bit" ||
    fail "--batch 1000000000's predictions: $got"
fi

# A rank reading another file (a node's stale copy): named with rank 0's, exit 2, nothing written.
"$bin/lockstep-data" regression --out reg_other.h5 --samples 300 --features 3 --seed 3 >/dev/null ||
  fail "lockstep-data regression (seed 3)"
out=$(timeout 120 "$mpiexec" -n 1 --oversubscribe "$bin/lockstep-predict" --threads 1 \
        --checkpoint reg_ckpt --data reg.h5 --out reg_mixed.h5 : -n 1 --oversubscribe \
        "$bin/lockstep-predict" --threads 1 --checkpoint reg_ckpt --data reg_other.h5 \
        --out reg_mixed.h5 2>&1)
rc=$?
[[ $rc -eq 2 && ! -e reg_mixed.h5 ]] &&
  grep -q "rank 1 reads reg_other.h5 (test): 60 rows of (3,) float32, as rank 0's reg.h5 (test) does, but other values" <<<"$out" &&
  echo "ok: predict with a rank on another file: named, exit 2, nothing written" ||
  fail "predict with rank 1 on another file: exit $rc (expected 2 naming it), output $(ls reg_mixed.h5 2>&1)"$'\n'"$out"

# Only the inputs are read, and what is written follows the checkpoint: the test split's x alone
# (no y), and the same x with integer labels (a classification file by the label rule), give the
# regression checkpoint's predictions, the same bits. Before, the first was refused (no y) and the
# second read as 4 classes ("has another shape").
py "
import h5py, numpy as np
src = h5py.File('reg.h5')
for name, labels in (('reg_x.h5', None), ('reg_cls.h5', np.arange(60) % 4)):
    with h5py.File(name, 'w') as f:
        for k, v in src.attrs.items(): f.attrs[k] = v
        f['test/x'] = src['test']['x'][...]
        if labels is not None: f['test/y'] = labels.astype(np.int32)
assert src['test']['x'].shape[0] == 60, src['test']['x'].shape" || fail "writing reg_x.h5"
for f in reg_x reg_cls; do
  predict 2 --checkpoint reg_ckpt --data $f.h5 --out ${f}_pred.h5 --batch 7
  [[ $rc -eq 0 ]] || fail "predict on $f.h5 exits $rc: $out"
  got=$(py "
import h5py
a, b = h5py.File('reg_pred.h5'), h5py.File('${f}_pred.h5')
print('same' if list(b) == ['predictions'] and a['predictions'][...].tobytes() == b['predictions'][...].tobytes() else f'{list(b)} differ')")
  [[ "$got" == same ]] && echo "ok: $f.h5 (inputs only, or other targets) gives the checkpoint's regression predictions" ||
    fail "predictions on $f.h5: $got"
done
# A NaN among the inputs: refused naming the row, exit 2, no file (before: NaN predictions).
py "
import h5py, numpy as np
x = h5py.File('reg.h5')['test']['x'][...].astype(np.float32)
x[41, 1] = np.nan
h5py.File('reg_nan.h5', 'w')['test/x'] = x" || fail "writing reg_nan.h5"
predict 2 --checkpoint reg_ckpt --data reg_nan.h5 --out nan_pred.h5 --batch 7
[[ $rc -eq 2 && ! -e nan_pred.h5 && ! -e nan_pred.h5.tmp ]] &&
  grep -q "test/x: row 41, value 1 is nan" <<<"$out" &&
  echo "ok: a NaN input is refused naming its row, exit 2, no file" ||
  fail "a NaN input: exit $rc, expected 2 naming row 41 and no file: $out"

# ---- tokens: a small GPT ----
/usr/bin/python3 - >corpus.txt <<'EOF'
import random
random.seed(5)
words = ["alpha", "beta", "gamma", "lockstep", "ranks", "train", "model", "bytes", "\n"]
print(" ".join(random.choice(words) for _ in range(4000)))
EOF
"$bin/lockstep-data" text --in corpus.txt --out corpus.h5 --seq-len 32 >/dev/null || fail "lockstep-data text"
gpt=gpt:layers=2,heads=2,dim=32,ctx=32
out=$(timeout 120 "$mpiexec" -n 2 --oversubscribe "$bin/lockstep-train" --data corpus.h5 \
        --model "$gpt" --global-batch 16 --threads 1 --optimizer adamw --lr 0.01 --steps 30 \
        --progress none --checkpoint-dir gpt_ckpt 2>&1) || fail "the GPT's training exits $?: $out"
predict 2 --checkpoint gpt_ckpt --data corpus.h5 --out gpt_all.h5 --batch 8
[[ $rc -eq 0 ]] || fail "predict on tokens exits $rc: $out"
predict 3 --checkpoint gpt_ckpt --data corpus.h5 --out gpt_top.h5 --batch 8 --top 3
[[ $rc -eq 0 ]] || fail "predict --top 3 exits $rc: $out"
want=$(eval_figure test_accuracy corpus.h5 "$gpt" gpt_ckpt --global-batch 16)
got=$(py "
import h5py, numpy as np
a, t = h5py.File('gpt_all.h5'), h5py.File('gpt_top.h5')
n = h5py.File('corpus.h5')['test']['tokens'].shape[0]
assert a['logits'].shape == (n, 32, 256) and a['predicted'].shape == (n, 32), a['logits'].shape
assert t['top_ids'].shape == (n, 32, 3) and t['top_probs'].shape == (n, 32, 3)
l = a['logits'][...].astype(np.float64)
p = np.exp(l - l.max(-1, keepdims=True)); p /= p.sum(-1, keepdims=True)
ids = t['top_ids'][...]
assert np.array_equal(ids[..., 0], a['predicted'][...]), 'top id 0 is not the predicted byte'
assert np.array_equal(t['predicted'][...], a['predicted'][...]), 'predicted differs with --top'
assert np.allclose(np.take_along_axis(p, ids, -1), t['top_probs'][...], atol=1e-6), 'top_probs'
assert (np.diff(t['top_probs'][...], axis=-1) <= 0).all(), 'top_probs not descending'
tokens = h5py.File('corpus.h5')['test']['tokens'][...]
print(f\"{(a['predicted'][...] == tokens[:, 1:]).mean():.4f}\")") || fail "the GPT's predictions: $got"
[[ -n $want && "$got" == "$want" ]] &&
  echo "ok: GPT next-byte predictions (all logits at 2 ranks, top 3 at 3 ranks) agree; accuracy $got is --eval-only's" ||
  fail "the GPT's predicted accuracy $got, --eval-only's $want"

# ---- refusals ----
before=$(md5sum <reg_pred.h5)
e2e_refused "an output that exists" "exists" "$bin/lockstep-predict" --checkpoint reg_ckpt --data reg.h5 --out reg_pred.h5
[[ $(md5sum <reg_pred.h5) == "$before" ]] || fail "a refused prediction changed the existing output"
# At 2 ranks the same refusal is printed once and every rank exits 2, without MPI_Abort's banner.
predict 2 --checkpoint reg_ckpt --data reg.h5 --out reg_pred.h5
[[ $rc -eq 2 && $(grep -c '^error:' <<<"$out") -eq 1 ]] && ! grep -q MPI_ABORT <<<"$out" ||
  fail "an output that exists, at 2 ranks: exit $rc, expected 2, one error line, no abort: $out"
predict 2 --checkpoint reg_ckpt --data reg.h5 --out ""
[[ $rc -eq 2 ]] && grep -q -- "--out must name the file to write" <<<"$out" ||
  fail "an empty --out: exit $rc: $out"
e2e_refused "a GPT checkpoint on regression rows" "reads token rows, a GPT's, but reg.h5:test is not a token split" "$bin/lockstep-predict" --checkpoint gpt_ckpt --data reg.h5 --out x1.h5
"$bin/lockstep-data" synthetic --kind tokens --vocab 300 --seq-len 32 --samples 40 --out v300.h5 >/dev/null ||
  fail "lockstep-data synthetic --kind tokens"
e2e_refused "a GPT checkpoint on tokens of another vocabulary" "wte has shape (256, 32) in the checkpoint, but model" "$bin/lockstep-predict" --checkpoint gpt_ckpt --data v300.h5 --out x5.h5
e2e_refused "a missing group" "no group 'nope'" "$bin/lockstep-predict" --checkpoint reg_ckpt --data reg.h5 --group nope --out x2.h5
e2e_refused "--batch 0" "batch" "$bin/lockstep-predict" --checkpoint reg_ckpt --data reg.h5 --out x3.h5 --batch 0
e2e_refused "--top on regression data" "top" "$bin/lockstep-predict" --checkpoint reg_ckpt --data reg.h5 --out x4.h5 --top 2
for f in x1 x2 x3 x4 x5; do
  [[ ! -e $f.h5 && ! -e $f.h5.tmp ]] || fail "a refused prediction left $f.h5"
done

# A full disk (a 300 KiB tmpfs, root only; else skipped with the reason): the GPT's logits do not
# fit. Exit 1, one line naming the file and the cause, no temporary or final file left (before: a
# stack of HDF5 diagnostics, and PRED.h5.tmp left behind).
mkdir small
if mount -t tmpfs -o size=300k tmpfs small 2>/dev/null; then
  predict 2 --checkpoint gpt_ckpt --data corpus.h5 --out small/full.h5 --batch 8
  left=$(ls -A small)
  umount small || fail "cannot unmount small"
  [[ -z $left ]] || fail "a full disk left $left"
  [[ $rc -eq 1 ]] && grep -q "writing small/full.h5.tmp failed: No space left on device" <<<"$out" &&
    ! grep -q "HDF5-DIAG" <<<"$out" &&
    echo "ok: a full disk: exit 1 naming the file and the cause" ||
    fail "a full disk: exit $rc, expected 1 with one message naming the file: $out"
else
  echo "skipped the full-disk case: mount -t tmpfs is not permitted here (the test runs it as root)"
fi

e2e_finish predict_test
