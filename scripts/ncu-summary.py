#!/usr/bin/env python3
"""Where a GPU step's device time goes, by kind of kernel, from Nsight Compute's kernel times.

    ncu --metrics gpu__time_duration.sum --csv --print-units base --log-file K.csv \\
        lockstep-bench train --device cuda ... --steps 1 --warmup 0 --peak-size 64
    python3 scripts/ncu-summary.py K.csv [--steps N] [--top K]

Reads the rows of metric gpu__time_duration.sum in Nsight Compute's CSV (one per kernel launch;
any other line in the file, such as the program's own output, is skipped), sorts the kernels by
name into kinds (attention, GEMMs, column sums, bias, GELU, layer norm, residual, embedding, loss,
optimizer, casts, other) and prints each kind's milliseconds per step (the total over --steps,
default 1: the steps the run made, warm-up included, so that its few set-up kernels count as a
small error) with its share, then the K kernels (default 12) that took the most time. ncu times
each kernel alone (launches serialised, caches flushed), so the total exceeds the step's wall
time: compare the shares and the kinds between runs. Exit 1 on a file without such rows, 2 on
bad arguments.
"""
import argparse
import collections
import csv
import re
import sys

METRIC = "gpu__time_duration.sum"
# (kind, pattern on the lower-case kernel name): the first that matches. The layer norm before the
# optimizer (whose global norm's kernels are column-pass-like too); cuDNN's fused attention kernels
# carry "sdpa" or "fmha"; CUB's radix sort is the embedding backward's grouping of positions by
# token; the optimizer's kinds include the gradients' division by the ranks. cuBLAS(Lt)'s own
# kernels are products whatever epilogue they carry (nvjet_..._geluauxbias_... is the MLP's first
# product with its bias and GELU), so they are matched before the bias and GELU kinds.
KINDS = [
    ("attention", r"attention|flash|sdpa|fmha|softmax|heads_kernel|row_dots"),
    ("GEMMs", r"^(void )?(nvjet|sm90_xmma|sm80_xmma|cutlass|cublas)"),
    ("layer norm", r"layernorm|layer_norm"),
    ("optimizer", r"adam|sgd|momentum|update_kernel|norm_finish|square_partials|sum_of_squares|"
                  r"clip|scale_kernel|sqrt_kernel|divide"),
    ("column sums", r"column_sums|partials_kernel|finish_kernel"),
    ("bias", r"fill_rows|add_rows|bias_epilogue"),
    ("GELU", r"gelu"),
    ("residual", r"residual"),
    ("embedding", r"embedding|radixsort|tokens_from_floats"),
    ("loss", r"xent|cross_entropy|row_stats|mse_rows"),
    ("casts", r"cast|bf16_to|to_bf16|f32_to|f32x4_to"),
    ("GEMMs", r"gemm|xmma|cutlass|nvjet|sm90_|sm80_|cublas|splitk|hmma|matmul"),
]
TO_NS = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6,
         "second": 1e9, "s": 1e9}


def kind_of(name):
    lower = name.lower()
    for kind, pattern in KINDS:
        if re.search(pattern, lower):
            return kind
    return "other"


def kernel_times(lines):
    """(kernel name, nanoseconds) for each row of METRIC after a header naming the columns."""
    header = None
    for row in csv.reader(lines):
        if "Kernel Name" in row and "Metric Name" in row and "Metric Value" in row:
            header = {column: i for i, column in enumerate(row)}
            continue
        if header is None or len(row) != len(header):
            continue
        if row[header["Metric Name"]] != METRIC:
            continue
        try:
            value = float(row[header["Metric Value"]].replace(",", ""))
        except ValueError:
            continue
        unit = row[header["Metric Unit"]] if "Metric Unit" in header else "nsecond"
        yield row[header["Kernel Name"]], value * TO_NS.get(unit, 1.0)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("csv")
    p.add_argument("--steps", type=int, default=1)
    p.add_argument("--top", type=int, default=12)
    args = p.parse_args()
    if args.steps < 1 or args.top < 0:
        p.error("--steps must be at least 1 and --top not negative")
    try:
        with open(args.csv, newline="", errors="replace") as f:
            times = list(kernel_times(f))
    except OSError as e:
        print(f"ncu-summary: {args.csv}: {e}", file=sys.stderr)
        return 1
    if not times:
        print(f"ncu-summary: {args.csv}: no {METRIC} rows (ncu --csv --metrics {METRIC})",
              file=sys.stderr)
        return 1
    by_kind = collections.defaultdict(float)
    by_kernel = collections.defaultdict(lambda: [0.0, 0])
    for name, ns in times:
        by_kind[kind_of(name)] += ns
        entry = by_kernel[name]
        entry[0] += ns
        entry[1] += 1
    total = sum(by_kind.values())
    per_step = 1e6 * args.steps
    print(f"{len(times)} kernel launches, {total / per_step:.3f} ms a step "
          f"(each kernel timed alone, over {args.steps} step(s))")
    print(f"{'kind':<14}{'ms/step':>10}{'share':>8}")
    for kind, ns in sorted(by_kind.items(), key=lambda kv: -kv[1]):
        print(f"{kind:<14}{ns / per_step:>10.3f}{100 * ns / total:>7.1f}%")
    if args.top:
        print(f"{'ms/step':>10}{'launches':>10}  kernel (top {args.top})")
        for name, (ns, count) in sorted(by_kernel.items(), key=lambda kv: -kv[1][0])[:args.top]:
            short = re.sub(r"\(.*", "", name.replace("(anonymous namespace)", "{anon}"))[:100]
            print(f"{ns / per_step:>10.3f}{count:>10}  {short}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
