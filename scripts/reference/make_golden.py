#!/usr/bin/env python3
"""Regenerates tests/golden/: reference logits (reference.py) for
  (a) tiny models that `lamina gen-model` writes, one per weight type and architecture,
  (b) the default SmolLM2-135M-Instruct Q4_1 model on three prompts, with 32 greedy tokens, and
  (c) the real Gemma 3 270M Q4_K_M (scripts/fetch-model.sh gemma3), the same way.
The test (tests/test_golden.cpp) re-creates the tiny models, checks their SHA-256, and compares
lamina's logits with these files.

  make_golden.py --lamina build/tools/lamina --model ~/.cache/lamina/models/SmolLM2-...gguf \
                 --gemma3 ~/.cache/lamina/models/gemma-3-270m-q4_k_m.gguf [--only NAME-PREFIX ...]

With --only, only the cases whose names start with a prefix are computed; the others are kept
from the existing golden.json.
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
VOCAB = os.path.join(ROOT, '..', 'shared', 'data', 'vocab', 'ggml-vocab-llama-spm.gguf')
TYPES = ['f32', 'f16', 'bf16', 'q8_0', 'q4_0', 'q4_1', 'q4_K', 'q6_K', 'q5_0', 'q5_1', 'q2_K', 'q3_K', 'q5_K', 'iq4_nl',
         'iq4_xs']
PROMPTS = ['The capital of France is', 'def fibonacci(n):', 'Once upon a time, in a small village,']
GOLDEN_CTX = 256  # the context tests/test_golden.cpp runs with
TINY_TOKENS = '1 450 4996 17354 1701 432 975 278 17366 11203 29889'  # "The quick brown fox ..."


def sha256(path):
    h = hashlib.sha256()
    with open(path, 'rb') as f:
        for chunk in iter(lambda: f.read(1 << 20), b''):
            h.update(chunk)
    return h.hexdigest()


def reference(model, tokens, out_bin, greedy=0):
    cmd = [sys.executable, os.path.join(HERE, 'reference.py'), model, '--tokens', tokens, '--top', '10',
           '--logits-out', out_bin, '--ctx', str(GOLDEN_CTX)]
    if greedy:
        cmd += ['--greedy', str(greedy)]
    return json.loads(subprocess.check_output(cmd))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--lamina', required=True)
    ap.add_argument('--model', required=True, help='the default SmolLM2 Q4_1 GGUF')
    ap.add_argument('--gemma3', required=True, help='the Gemma 3 270M Q4_K_M GGUF')
    ap.add_argument('--only', nargs='*', help='compute only the cases whose names start with these')
    ap.add_argument('--out', default=os.path.join(ROOT, 'tests', 'golden'))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    wanted = lambda name: not a.only or any(name.startswith(p) for p in a.only)
    cases = []
    tiny = [('tiny', t) for t in TYPES] + [(p, t) for p in ('tiny-qwen2', 'tiny-llama3', 'tiny-qwen3', 'tiny-gemma3', 'tiny-phi3', 'tiny-phi3-longrope', 'tiny-moe', 'tiny-qwen3moe', 'tiny-qwen2moe')
                                           for t in ('f16', 'q8_0')]
    with tempfile.TemporaryDirectory() as tmp:
        for preset, t in tiny:
            name = f'{preset}-{t}'
            if not wanted(name):
                continue
            path = os.path.join(tmp, f'{name}.gguf')
            subprocess.check_call([a.lamina, 'gen-model', '--preset', preset, '--type', t, '--vocab', VOCAB,
                                   '--seed', '42', '-o', path])
            r = reference(path, TINY_TOKENS, os.path.join(a.out, f'{name}.f32'))
            cases.append({'name': name, 'gen': {'preset': preset, 'type': t, 'seed': 42},
                          'sha256': sha256(path), 'tokens': r['tokens'], 'top': r['top'],
                          'logits': f'{name}.f32'})
    for tag, model in (('smollm2', a.model), ('gemma3', a.gemma3)):
        for i, p in enumerate(PROMPTS):
            name = f'{tag}-p{i}'
            if not wanted(name):
                continue
            ids = subprocess.check_output([a.lamina, 'tokenize', '-m', model, '-p', p]).decode().strip()
            r = reference(model, ids, os.path.join(a.out, f'{name}.f32'), greedy=32)
            case = {'name': name, 'sha256': sha256(model), 'prompt': p, 'tokens': r['tokens'], 'top': r['top'],
                    'greedy': r['greedy'], 'greedy_margins': r['greedy_margins'], 'logits': f'{name}.f32'}
            if tag == 'smollm2':
                case['default_model'] = True
            cases.append(case)
    path = os.path.join(a.out, 'golden.json')
    if a.only and os.path.exists(path):  # keep the cases not recomputed, in their order
        with open(path) as f:
            old = json.load(f)['cases']
        fresh = {c['name']: c for c in cases}
        cases = [fresh.pop(c['name'], c) for c in old] + list(fresh.values())
    with open(path, 'w') as f:
        json.dump({'generator': 'scripts/reference/make_golden.py (reference.py, NumPy float64, f16 KV cache)',
                   'cases': cases}, f, indent=1)
    print(f'{len(cases)} cases written to {a.out}')


if __name__ == '__main__':
    main()
