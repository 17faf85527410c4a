# Per-kernel time in the last decode steps of a cupti_trace.cpp log (steps end at the sampling
# kernel, or where none runs before the next step's first kernel): for each kernel kind, the wall
# time it adds to the step (end - max(start, previous end): with programmatic dependent launch
# kernels overlap) and its own span (end - start), then the same by position in the step.
# Usage: steps.py TRACE [STEPS]
import sys, collections, re
rows = []
for line in open(sys.argv[1]):
    p = line.split(" ", 4)
    if len(p) < 5: continue
    rows.append((int(p[0]), int(p[1]), int(p[2]), int(p[3]), p[4].strip()))
rows.sort()
def kind(name):
    m = re.search(r"(q_dp4a_pipe|q_dp4a|q_repacked|v5_stream|v6_mma|q6k_dp4a|q4k_dp4a|attn_\w+?kernel|attn_rope\w*|rmsnorm_kernel|rope\w*?kernel|sample_kernel|dequantize_rows_kernel|lookup_staged_kernel)", name) or re.search(r"([a-z0-9]+(?:_[a-z0-9]+)*_kernel)", name)
    base = m.group(1) if m else name[:40]
    t = re.search(r"ILi(\d+)ELb(\d)ELi(\d)ELi(\d)ELb(\d)", name)
    return base + (f"<{t.group(1)}b r{t.group(3)} u{t.group(4)} g{t.group(5)}>" if t else "")
samp = [i for i, r in enumerate(rows) if "sample" in r[4].lower() or "argmax" in r[4].lower()]
print(f"{len(rows)} kernels, {len(samp)} sampling kernels")
if not samp:  # greedy ids made by the logits GEMV: a step ends before the kernel that starts the next
    first = lambda n: "upload_inputs" in n or "dequantize_rows" in n or "lookup_staged" in n
    samp = [i - 1 for i, r in enumerate(rows) if i > 0 and first(r[4]) and not first(rows[i - 1][4])]
    print(f"{len(samp)} steps ended by the kernel before the next step's first")
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 20
if len(samp) < steps + 2: sys.exit("not enough steps")
lo, hi = samp[-steps - 1] + 1, samp[-1] + 1
sel = rows[lo:hi]
agg = collections.defaultdict(lambda: [0, 0.0, 0.0, 0, 0])
prev_end = rows[lo - 1][1]
for s, e, g, regs, name in sel:
    k = kind(name); a = agg[(k, g)]
    a[0] += 1; a[1] += max(0, e - max(s, prev_end)); a[2] += e - s; a[3] = regs
    prev_end = max(prev_end, e)
span = (sel[-1][1] - rows[lo - 1][1]) / steps
busy = sum(a[1] for a in agg.values()) / steps
print(f"per step: {span/1e3:.1f} us wall, {len(sel)/steps:.0f} kernels and copies, "
      f"{(span - busy)/1e3:.1f} us with none running (the host's turn)")
print(f"{'kernel':58s} {'grid':>5s} {'regs':>4s} {'n/step':>6s} {'adds us':>8s} {'each':>6s} {'span':>6s}")
for (k, g), (n, add, own, regs, _) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
    print(f"{k[:58]:58s} {g:5d} {regs:4d} {n/steps:6.0f} {add/steps/1e3:8.1f} {add/n/1e3:6.2f} {own/n/1e3:6.2f}")
# By position in the step (averaged over the steps): the first layers and the tail.
per = collections.defaultdict(lambda: [0.0, 0.0, 0.0, ""])
bounds = samp[-steps - 1:]
for j in range(steps):
    a, b = bounds[j] + 1, bounds[j + 1] + 1
    prev = rows[a - 1][1]
    t0 = rows[a - 1][1]
    for i, (s, e, g, regs, name) in enumerate(rows[a:b]):
        x = per[i]; x[0] += max(0, e - max(s, prev)) / steps; x[1] += (e - s) / steps
        x[2] += (s - t0) / steps; x[3] = kind(name)
        prev = max(prev, e)
n = len(per)
print(f"\nposition  start-us  adds-us  span-us  kernel   ({n} per step)")
for i in list(range(min(16, n))) + list(range(max(16, n - 8), n)):
    x = per[i]; print(f"{i:8d} {x[2]/1e3:9.2f} {x[0]/1e3:8.2f} {x[1]/1e3:8.2f}  {x[3]}")
