#!/usr/bin/env python3
"""Where the time of a `lockstep-train --trace` run went, per track and span name.

    python3 scripts/trace-summary.py trace.json [--rank R] [--skip-steps N]

For each track (thread) of rank R (default 0): every span name (a layer's forward and backward
apart) with its count, total, mean and share of the track's total (on the host's training track
the phases hold their layers' spans, so both count there). On a GPU run it then compares the device's own timeline: how much of
the time the "GPU phases" spans cover was taken by the spans of "GPU stream: compute" (the
layers' kernels, the loss, the optimizer; the parts inside those phases only, not an
evaluation's), and so how much the compute stream sat idle inside the step (launch gaps, waits
for the host). --skip-steps N drops the spans that begin before the
end of step N's optimizer phase (warm-up). Exit 1 on a file that is not a
trace, 2 on bad arguments.
"""
import argparse
import collections
import json
import sys


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("trace")
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--skip-steps", type=int, default=0)
    args = p.parse_args()
    try:
        with open(args.trace) as f:
            events = json.load(f)["traceEvents"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"trace-summary: {args.trace}: not a readable trace ({e})", file=sys.stderr)
        return 1
    names = {e["tid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name" and e.get("pid") == args.rank}
    spans = [e for e in events if e.get("ph") == "X" and e.get("pid") == args.rank]
    if not spans:
        print(f"trace-summary: {args.trace}: no spans of rank {args.rank}", file=sys.stderr)
        return 1
    if args.skip_steps > 0:
        # A step ends with its one optimizer phase: on a GPU the device's ("GPU phases"), else
        # the host's ("training").
        phase_track = next((t for t, n in names.items() if n == "GPU phases"),
                           next((t for t, n in names.items() if n == "training"), None))
        ends = sorted(e["ts"] + e["dur"] for e in spans
                      if e["tid"] == phase_track and e["name"] == "optimizer")
        if len(ends) >= args.skip_steps:
            start = ends[args.skip_steps - 1]
            spans = [e for e in spans if e["ts"] >= start]
    by_track = collections.defaultdict(list)
    for e in spans:
        by_track[names.get(e["tid"], f"thread {e['tid']}")].append(e)

    print(f"{'track':<24} {'span':<26} {'count':>6} {'total ms':>10} {'mean us':>9} {'share':>7}")
    for track in sorted(by_track):
        rows = collections.defaultdict(lambda: [0, 0.0])
        for e in by_track[track]:
            # A layer's forward and backward spans share its name: the category tells them apart.
            cat = e.get("cat")
            key = f"{e['name']} ({cat})" if cat in ("forward", "backward") and cat != e["name"] \
                else e["name"]
            rows[key][0] += 1
            rows[key][1] += e["dur"]
        total = sum(v[1] for v in rows.values()) or 1.0
        for name, (count, dur) in sorted(rows.items(), key=lambda kv: -kv[1][1]):
            print(f"{track[:24]:<24} {name[:26]:<26} {count:>6} {dur / 1e3:>10.3f} "
                  f"{dur / count:>9.1f} {100 * dur / total:>6.1f}%")

    phases = by_track.get("GPU phases", [])
    compute = by_track.get("GPU stream: compute", [])
    if phases and compute:
        covered = sum(e["dur"] for e in phases)
        # Only the compute spans' time inside the steps' phases counts: an evaluation's forward
        # passes run between steps.
        windows = sorted((e["ts"], e["ts"] + e["dur"]) for e in phases)
        busy = 0.0
        for e in compute:
            b, f = e["ts"], e["ts"] + e["dur"]
            busy += sum(max(0.0, min(f, w1) - max(b, w0)) for w0, w1 in windows
                        if w0 < f and w1 > b)
        print(f"GPU stream: compute busy {busy / 1e3:.3f} ms of the {covered / 1e3:.3f} ms its "
              f"steps' phases span ({100 * busy / covered:.1f}%; the rest: launch gaps and waits "
              f"for the host)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
