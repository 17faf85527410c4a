#!/usr/bin/env python3
"""Condenses `lamina kbench gemv|gemm` output: per shape/batch/type the best lamina variant
against cuBLAS from the same run (gemv: graph µs, % of copy bandwidth, speed-up; gemm: TFLOP/s
and % of cuBLAS)."""
import re
import sys

rows = {}
for line in open(sys.argv[1], encoding='utf-8'):
    cells = [c.strip() for c in line.strip().strip('|').split('|')]
    if len(cells) != 9 or not re.match(r'^\d+x\d+$', cells[0]):
        continue
    shape, b, t, variant, us, graph_us, gbs, pct, _ = cells
    key = (shape, int(b), t)
    entry = rows.setdefault(key, {'cublas': None, 'best': None})
    best_us = float(graph_us) if float(graph_us) > 0 else float(us)
    val = (best_us, variant, float(pct.rstrip('%')))
    if variant.startswith('cuBLAS'):
        entry['cublas'] = val
    elif entry['best'] is None or val[0] < entry['best'][0]:
        entry['best'] = val
if rows:
    print(f"{'N x K':<12} {'b':>2} {'type':<5} {'best lamina variant':<40} {'graph µs':>8} {'%copy':>6} {'cuBLAS µs':>9} {'speed-up':>8}")
for (shape, b, t), e in rows.items():
    if not e['best'] or not e['cublas']:
        continue
    us, v, pct = e['best']
    print(f"{shape:<12} {b:>2} {t:<5} {v:<40.40} {us:>8.2f} {pct:>5.1f}% {e['cublas'][0]:>9.2f} {e['cublas'][0] / us:>7.2f}x")

gemm = {}
for line in open(sys.argv[1], encoding='utf-8'):
    cells = [c.strip() for c in line.strip().strip('|').split('|')]
    if len(cells) != 6 or not re.match(r'^\d+x\d+x\d+$', cells[0]):
        continue
    shape, t, variant, us, tflops, _ = cells
    entry = gemm.setdefault((shape, t), {'cublas': None, 'best': None})
    val = (float(us), variant, float(tflops))
    if variant.startswith('cuBLAS'):
        entry['cublas'] = val
    elif entry['best'] is None or val[0] < entry['best'][0]:
        entry['best'] = val
if gemm:
    print(f"{'M x N x K':<18} {'type':<5} {'best lamina variant':<56} {'TFLOP/s':>8} {'cuBLAS':>8} {'% cuBLAS':>8}")
for (shape, t), e in gemm.items():
    if not e['best'] or not e['cublas']:
        continue
    us, v, tf = e['best']
    print(f"{shape:<18} {t:<5} {v:<56.56} {tf:>8.1f} {e['cublas'][2]:>8.1f} {100 * e['cublas'][0] / us:>7.1f}%")
