#!/usr/bin/env python3
"""Summarise one kernel's per-SASS-line profile, to set a lamina kernel beside cuBLAS's.

Input: the CSV of `ncu -i REPORT --page source --csv --print-source sass` (a report taken with
`ncu --set full -k regex:NAME --launch-skip N -c 1 -o REPORT ...`). Output: the instructions
executed by opcode, the stall reasons, the share of stall samples in code that runs once per warp
(prologue, epilogue) against the loops, and the lines with the most samples.

    python3 scripts/ncu-sass-summary.py h2-sass.csv [cublas-sass.csv ...]
"""
import collections
import csv
import sys


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def summarise(path):
    rows = list(csv.reader(open(path, errors="replace")))
    head_at = next(i for i, r in enumerate(rows) if "Source" in r)
    head, data = rows[head_at], rows[head_at + 1:]
    src = head.index("Source")
    executed = head.index("Instructions Executed")
    samples = head.index("Warp Stall Sampling (All Samples)")
    stalls = [i for i, c in enumerate(head) if c.startswith("stall_") and "Not Issued" not in c]
    by_op, samples_by_op, by_stall = collections.Counter(), collections.Counter(), collections.Counter()
    lines = []
    for r in data:
        if len(r) <= max(src, executed, samples):
            continue
        words = r[src].split()
        if not words:
            continue
        op = (words[1] if words[0].startswith("@") and len(words) > 1 else words[0]).split(".")[0]
        e, s = number(r[executed]), number(r[samples])
        by_op[op] += e
        samples_by_op[op] += s
        for i in stalls:
            by_stall[head[i][len("stall_"):]] += number(r[i])
        lines.append((s, e, r[src].strip()))
    total_e, total_s = sum(by_op.values()), sum(samples_by_op.values())
    # A line run at most as often as the busiest line's sixteenth is taken for code outside the loops.
    busiest = max((e for _, e, _ in lines), default=0)
    once = sum(s for s, e, _ in lines if e <= busiest / 16)
    print(f"== {path}: {len(lines)} SASS lines, {total_e:,.0f} instructions executed, {total_s:,.0f} stall samples")
    print(f"   samples in code run at most 1/16 as often as the busiest line: {100 * once / max(total_s, 1):.1f} %")
    print("   opcodes (executed %, samples %):")
    for op, e in by_op.most_common(16):
        print(f"     {op:11s} {100 * e / max(total_e, 1):5.1f} % {100 * samples_by_op[op] / max(total_s, 1):5.1f} %")
    stall_total = sum(by_stall.values())
    print("   stall reasons: " + ", ".join(f"{k} {100 * v / max(stall_total, 1):.1f} %" for k, v in by_stall.most_common(8)))
    print("   lines with the most samples:")
    for s, e, text in sorted(lines, reverse=True)[:10]:
        print(f"     {s:7.0f} {e:10.0f}  {text[:72]}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for p in sys.argv[1:]:
        summarise(p)
