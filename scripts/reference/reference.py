#!/usr/bin/env python3
"""Independent reference forward pass for Llama-family GGUF models (NumPy, float64).

It shares no code with lamina: its own GGUF parser and dequantisers (ggml block layouts), and
the forward semantics of llama.cpp's build_llama / build_qwen2 / build_qwen3 / build_gemma3 /
build_phi3 (formats.md section 3; Mixtral-style, qwen2moe and qwen3moe experts): RMSNorm, NORM (llama) or NEOX (the others) RoPE with optional
rope_freqs, GQA, causal softmax attention, SwiGLU, tied embeddings, QKV biases; per-head q/k
norms (qwen3, gemma3); phi3's fused QKV and gate/up tensors; gemma3's sqrt(n_embd) embedding
scale, norms after attention and FFN, GELU (tanh) gate, and sliding-window layers (every sixth
global) with their own RoPE base. Like llama.cpp, K and V are rounded to f16 in the cache
(--kv f32 turns that off). Everything else is float64.

  reference.py MODEL.gguf --tokens "1 2 3" [--greedy N] [--top K] [--logits-out FILE]
"""
import argparse
import json
import struct
import sys

import numpy as np

# ---- GGUF ------------------------------------------------------------------------------------

SCALAR = {0: '<B', 1: '<b', 2: '<H', 3: '<h', 4: '<I', 5: '<i', 6: '<f', 7: '<?', 10: '<Q', 11: '<q', 12: '<d'}
BLOCK = {0: (1, 4), 1: (1, 2), 30: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
         10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210), 20: (32, 18), 23: (256, 136)}
# The 16 values of IQ4_NL and IQ4_XS (ggml's kvalues_iq4nl).
IQ4 = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], dtype=np.float64)


class Reader:
    def __init__(self, buf):
        self.b, self.p = buf, 0

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.b, self.p)[0]
        self.p += struct.calcsize(fmt)
        return v

    def string(self):
        n = self.take('<Q')
        s = bytes(self.b[self.p:self.p + n]).decode('utf-8', errors='replace')
        self.p += n
        return s

    def value(self, t):
        if t == 8:
            return self.string()
        if t == 9:
            et, n = self.take('<I'), self.take('<Q')
            return [self.value(et) for _ in range(n)]
        return self.take(SCALAR[t])


def load_gguf(path):
    buf = np.memmap(path, dtype=np.uint8, mode='r')
    r = Reader(buf)
    assert bytes(buf[:4]) == b'GGUF', 'not a GGUF file'
    r.p = 4
    version, n_t, n_kv = r.take('<I'), r.take('<q'), r.take('<q')
    assert version in (2, 3)
    kv = {}
    for _ in range(n_kv):
        k = r.string()
        kv[k] = r.value(r.take('<I'))
    infos = []
    for _ in range(n_t):
        name = r.string()
        nd = r.take('<I')
        ne = [r.take('<q') for _ in range(nd)]
        infos.append((name, ne, r.take('<I'), r.take('<Q')))
    align = kv.get('general.alignment', 32)
    base = (r.p + align - 1) // align * align
    tensors = {}
    for name, ne, t, off in infos:
        be, bb = BLOCK[t]
        n = int(np.prod(ne))
        raw = buf[base + off: base + off + n // be * bb]
        tensors[name] = (t, ne, raw)
    return kv, tensors


def f16(a):
    return np.ascontiguousarray(a).view(np.float16).astype(np.float64)


def k4_scales(S):
    """The 8 six-bit scales and mins of a q4_K / q5_K block from its 12 bytes S (formats.md 2.3)."""
    sc = np.zeros((len(S), 8), np.int32)
    mn = np.zeros((len(S), 8), np.int32)
    for j in range(8):
        if j < 4:
            sc[:, j], mn[:, j] = S[:, j] & 63, S[:, j + 4] & 63
        else:
            sc[:, j] = (S[:, j + 4] & 15) | ((S[:, j - 4] >> 6) << 4)
            mn[:, j] = (S[:, j + 4] >> 4) | ((S[:, j] >> 6) << 4)
    return sc, mn


def dequant(t, ne, raw):
    n = int(np.prod(ne))
    if t == 0:
        x = raw.view(np.float32).astype(np.float64)
    elif t == 1:
        x = raw.view(np.float16).astype(np.float64)
    elif t == 30:
        x = (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    elif t in (2, 3, 6, 7, 8):
        bb = BLOCK[t][1]
        b = raw.reshape(-1, bb)
        d = f16(b[:, 0:2])
        if t == 8:
            x = d * b[:, 2:34].view(np.int8)
        else:
            off = 4 if t in (3, 7) else 2
            if t in (6, 7):
                qh = np.ascontiguousarray(b[:, off:off + 4]).view('<u4')
                off += 4
            qs = b[:, off:off + 16]
            q = np.concatenate([qs & 15, qs >> 4], axis=1).astype(np.int32)
            if t in (6, 7):
                q |= (((qh >> np.arange(32, dtype=np.uint32)) & 1) << 4).astype(np.int32)
            if t == 2:
                x = d * (q - 8)
            elif t == 6:
                x = d * (q - 16)
            else:
                x = d * q + f16(b[:, 2:4])
    elif t == 12:  # q4_K
        b = raw.reshape(-1, 144)
        d, dmin, S = f16(b[:, 0:2]), f16(b[:, 2:4]), b[:, 4:16].astype(np.int32)
        sc, mn = k4_scales(S)
        qs = b[:, 16:144].reshape(-1, 4, 32)
        q = np.stack([qs & 15, qs >> 4], axis=2).reshape(-1, 8, 32).astype(np.float64)
        x = (d[:, :, None] * sc[:, :, None] * q - dmin[:, :, None] * mn[:, :, None])
    elif t == 13:  # q5_K: q4_K's layout with a fifth bit per element in qh (formats.md 2.3)
        b = raw.reshape(-1, 176)
        d, dmin, S = f16(b[:, 0:2]), f16(b[:, 2:4]), b[:, 4:16].astype(np.int32)
        qh, qs = b[:, 16:48].astype(np.int32), b[:, 48:176].astype(np.int32)
        sc, mn = k4_scales(S)
        e = np.arange(256)
        byte = qs[:, 32 * (e // 64) + e % 32]
        q = np.where(e % 64 < 32, byte & 15, byte >> 4) + 16 * ((qh[:, e % 32] >> (e // 32)) & 1)
        x = d * sc[:, e // 32] * q - dmin * mn[:, e // 32]
    elif t == 10:  # q2_K: 16 sub-blocks of 16, 2-bit quants, a 4-bit scale and min each
        b = raw.reshape(-1, 84)
        S, qs = b[:, 0:16].astype(np.int32), b[:, 16:80].astype(np.int32)
        d, dmin = f16(b[:, 80:82]), f16(b[:, 82:84])
        e = np.arange(256)
        q = (qs[:, 32 * (e // 128) + e % 32] >> (2 * ((e % 128) // 32))) & 3
        s = S[:, e // 16]
        x = d * (s & 15) * q - dmin * (s >> 4)
    elif t == 11:  # q3_K: q2_K's quants minus 4 where the hmask bit is clear, 6-bit signed scales
        b = raw.reshape(-1, 110)
        hm, qs, S = b[:, 0:32].astype(np.int32), b[:, 32:96].astype(np.int32), b[:, 96:108].astype(np.int32)
        d = f16(b[:, 108:110])
        e = np.arange(256)
        half, j, l = e // 128, (e % 128) // 32, e % 32
        q = ((qs[:, 32 * half + l] >> (2 * j)) & 3) - np.where((hm[:, l] >> (4 * half + j)) & 1, 0, 4)
        t16 = np.arange(16)
        lo = np.where(t16 < 8, S[:, np.minimum(t16, 7)] & 15, S[:, np.maximum(t16 - 8, 0)] >> 4)
        hi = (S[:, 8 + t16 % 4] >> (2 * (t16 // 4))) & 3
        sc = (lo | (hi << 4)) - 32
        x = d * sc[:, e // 16] * q
    elif t == 20:  # iq4_nl: blocks of 32, a 4-bit index into IQ4 each, one f16 scale
        b = raw.reshape(-1, 18)
        qs = b[:, 2:18].astype(np.int32)
        x = f16(b[:, 0:2]) * IQ4[np.concatenate([qs & 15, qs >> 4], axis=1)]
    elif t == 23:  # iq4_xs: 8 sub-blocks of 32 with 6-bit scales (4 low bits, 2 high bits apart)
        b = raw.reshape(-1, 136)
        d = f16(b[:, 0:2])
        sh = np.ascontiguousarray(b[:, 2:4]).view('<u2').astype(np.int32)
        sl = b[:, 4:8].astype(np.int32)
        qs = b[:, 8:136].reshape(-1, 8, 16).astype(np.int32)
        ib = np.arange(8)
        ls = ((sl[:, ib // 2] >> (4 * (ib % 2))) & 15) | (((sh >> (2 * ib)) & 3) << 4)
        vals = IQ4[np.concatenate([qs & 15, qs >> 4], axis=2)]
        x = (d * (ls - 32))[:, :, None] * vals
    elif t == 14:  # q6_K
        b = raw.reshape(-1, 210)
        ql, qh = b[:, 0:128].astype(np.int32), b[:, 128:192].astype(np.int32)
        sc = b[:, 192:208].view(np.int8).astype(np.float64)
        d = f16(b[:, 208:210])
        q = np.zeros((len(b), 256), np.int32)
        for n_ in range(2):
            for k in range(4):
                lo = ql[:, 64 * n_ + 32 * (k & 1): 64 * n_ + 32 * (k & 1) + 32]
                lo = lo & 15 if k < 2 else lo >> 4
                hi = (qh[:, 32 * n_: 32 * n_ + 32] >> (2 * k)) & 3
                q[:, 128 * n_ + 32 * k: 128 * n_ + 32 * k + 32] = (lo | (hi << 4)) - 32
        x = d * np.repeat(sc, 16, axis=1) * q
    else:
        raise SystemExit(f'reference: tensor type {t} not implemented')
    x = np.asarray(x, dtype=np.float64).reshape(-1)[:n]
    return x.reshape(list(reversed(ne)))  # [ne1][ne0] for matrices


# ---- model -----------------------------------------------------------------------------------

class Model:
    def __init__(self, path, kv_f16=True, ctx=None):
        kv, T = load_gguf(path)
        a = kv['general.architecture']
        assert a in ('llama', 'qwen2', 'qwen2moe', 'qwen3', 'qwen3moe', 'gemma3', 'phi3'), a

        def u(key, default=None):
            v = kv.get(f'{a}.{key}', default)
            return v[0] if isinstance(v, list) else v
        self.E, self.L = u('embedding_length'), u('block_count')
        self.H = u('attention.head_count')
        self.HKV = u('attention.head_count_kv', self.H)
        self.hd = u('attention.key_length', self.E // self.H)
        self.n_rot = u('rope.dimension_count', self.hd)
        self.eps = u('attention.layer_norm_rms_epsilon')
        self.base = u('rope.freq_base', 10000.0)
        factor = u('rope.scaling.factor', None)
        self.freq_scale = 1.0 / factor if factor else 1.0
        self.neox = a != 'llama'  # (qwen2moe too)
        self.gemma = a == 'gemma3'
        self.scale = 1 / np.sqrt(self.hd)
        self.window, self.pattern, self.base_local = 0, 0, 10000.0
        self.n_used = u('expert_used_count', 0)
        self.norm_topk = a != 'qwen2moe'  # qwen2moe: the routed weights are not renormalised
        if self.gemma:
            self.window = u('attention.sliding_window', 0)
            self.pattern = u('attention.sliding_window_pattern', 6)
            if self.L == 62:
                self.scale = 1 / np.sqrt(self.E // self.H)
        self.kv_f16 = kv_f16
        W = lambda n: dequant(*T[n]) if n in T else None
        self.tok = W('token_embd.weight')
        self.out_norm = W('output_norm.weight')
        self.out = W('output.weight') if 'output.weight' in T else self.tok
        self.freqs = W('rope_freqs.weight')
        # LongRoPE (Phi-3 128k): the long factors for a context past the original one (ctx: the
        # context the engine runs with; llama.cpp's choice), cos and sin times attn_factor
        self.attn_factor = u('rope.scaling.attn_factor', 1.0)
        if 'rope_factors_long.weight' in T:
            orig = u('rope.scaling.original_context_length', u('context_length'))
            ctx = ctx or u('context_length')
            self.freqs = W('rope_factors_long.weight' if ctx > orig else 'rope_factors_short.weight')
        self.layers = []
        for l in range(self.L):
            p = f'blk.{l}.'
            self.layers.append({k: W(p + n) for k, n in [
                ('an', 'attn_norm.weight'), ('q', 'attn_q.weight'), ('k', 'attn_k.weight'), ('v', 'attn_v.weight'),
                ('o', 'attn_output.weight'), ('bq', 'attn_q.bias'), ('bk', 'attn_k.bias'), ('bv', 'attn_v.bias'),
                ('bo', 'attn_output.bias'), ('fn', 'ffn_norm.weight'), ('g', 'ffn_gate.weight'),
                ('u', 'ffn_up.weight'), ('d', 'ffn_down.weight'), ('qn', 'attn_q_norm.weight'),
                ('kn', 'attn_k_norm.weight'), ('pan', 'post_attention_norm.weight'),
                ('pfn', 'post_ffw_norm.weight'), ('qkv', 'attn_qkv.weight'), ('ri', 'ffn_gate_inp.weight'),
                ('ge', 'ffn_gate_exps.weight'), ('ue', 'ffn_up_exps.weight'), ('de', 'ffn_down_exps.weight'),
                ('sgi', 'ffn_gate_inp_shexp.weight'), ('sg', 'ffn_gate_shexp.weight'), ('su', 'ffn_up_shexp.weight'),
                ('sd', 'ffn_down_shexp.weight')]})
            w = self.layers[-1]
            if w['qkv'] is not None:  # phi3: Q, K, V rows in one tensor; gate and up rows in ffn_up
                qd, kvd = self.H * self.hd, self.HKV * self.hd
                w['q'], w['k'], w['v'] = w['qkv'][:qd], w['qkv'][qd:qd + kvd], w['qkv'][qd + kvd:]
                f = w['u'].shape[0] // 2
                w['g'], w['u'] = w['u'][:f], w['u'][f:]
        self.cache_k = [np.zeros((0, self.HKV, self.hd)) for _ in range(self.L)]
        self.cache_v = [np.zeros((0, self.HKV, self.hd)) for _ in range(self.L)]

    def rms(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def local(self, l):  # a sliding-window layer (gemma3)
        return self.window > 0 and self.pattern > 0 and l % self.pattern != self.pattern - 1

    def rope(self, x, pos, local=False):  # x [T, heads, hd]
        half = self.n_rot // 2
        i = np.arange(half, dtype=np.float64)
        base = self.base_local if local else self.base
        theta = pos[:, None].astype(np.float64) * base ** (-2.0 * i / self.n_rot)[None, :]
        if self.freqs is not None and not local:
            theta = theta / self.freqs[None, :]
        if not local:
            theta *= self.freq_scale
        m = 1.0 if local else self.attn_factor
        c, s = m * np.cos(theta)[:, None, :], m * np.sin(theta)[:, None, :]
        x = x.copy()
        if self.neox:
            a, b = x[..., :half].copy(), x[..., half:self.n_rot].copy()
            x[..., :half], x[..., half:self.n_rot] = a * c - b * s, a * s + b * c
        else:
            a, b = x[..., 0:self.n_rot:2].copy(), x[..., 1:self.n_rot:2].copy()
            x[..., 0:self.n_rot:2], x[..., 1:self.n_rot:2] = a * c - b * s, a * s + b * c
        return x

    def moe(self, h, w):
        logits = h @ w['ri'].T  # [T, n_expert]
        p = np.exp(logits - logits.max(axis=-1, keepdims=True))
        p /= p.sum(axis=-1, keepdims=True)
        out = np.zeros_like(h)
        for t in range(h.shape[0]):
            top = np.argsort(-p[t], kind='stable')[:self.n_used]
            for e in top:  # expert e: ge/ue [n_expert, F, E], de [n_expert, E, F]
                g, u = w['ge'][e] @ h[t], w['ue'][e] @ h[t]
                norm = p[t, top].sum() if self.norm_topk else 1.0
                out[t] += p[t, e] / norm * (w['de'][e] @ ((g / (1 + np.exp(-g))) * u))
        if w['sgi'] is not None:  # qwen2moe's shared expert, gated by a sigmoid
            gate = 1 / (1 + np.exp(-(h @ w['sgi'])))
            g, u = h @ w['sg'].T, h @ w['su'].T
            out += gate[:, None] * (((g / (1 + np.exp(-g))) * u) @ w['sd'].T)
        return out

    def forward(self, tokens):
        """Appends tokens to the sequence; returns logits [len(tokens), n_vocab]."""
        T = len(tokens)
        p0 = self.cache_k[0].shape[0]
        pos = np.arange(p0, p0 + T)
        x = self.tok[np.asarray(tokens)]
        if self.gemma:
            x = x * np.sqrt(self.E)
        for l, w in enumerate(self.layers):
            h = self.rms(x, w['an'])
            q, k, v = h @ w['q'].T, h @ w['k'].T, h @ w['v'].T
            if w['bq'] is not None:
                q, k, v = q + w['bq'], k + w['bk'], v + w['bv']
            q, k = q.reshape(T, self.H, self.hd), k.reshape(T, self.HKV, self.hd)
            if w['qn'] is not None:
                q, k = self.rms(q, w['qn']), self.rms(k, w['kn'])
            q, k = self.rope(q, pos, self.local(l)), self.rope(k, pos, self.local(l))
            v = v.reshape(T, self.HKV, self.hd)
            if self.kv_f16:
                k, v = k.astype(np.float16).astype(np.float64), v.astype(np.float16).astype(np.float64)
            K = self.cache_k[l] = np.concatenate([self.cache_k[l], k])
            V = self.cache_v[l] = np.concatenate([self.cache_v[l], v])
            g = self.H // self.HKV
            Kq, Vq = np.repeat(K, g, axis=1), np.repeat(V, g, axis=1)  # [S, H, hd]
            s = np.einsum('thd,shd->hts', q, Kq) * self.scale
            j = np.arange(K.shape[0])[None, None, :]
            seen = j <= pos[None, :, None]
            if self.local(l):
                seen &= j > pos[None, :, None] - self.window
            s = np.where(seen, s, -np.inf)
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            s /= s.sum(axis=-1, keepdims=True)
            o = np.einsum('hts,shd->thd', s, Vq).reshape(T, self.H * self.hd)
            o = o @ w['o'].T
            if w['bo'] is not None:
                o = o + w['bo']
            if w['pan'] is not None:
                o = self.rms(o, w['pan'])
            x = x + o
            h = self.rms(x, w['fn'])
            if w['ri'] is not None:  # Mixtral-style experts: softmax router, top-k renormalised
                x = x + self.moe(h, w)
                continue
            gt = h @ w['g'].T
            if self.gemma:  # GELU, tanh form
                act = 0.5 * gt * (1 + np.tanh(np.sqrt(2 / np.pi) * (gt + 0.044715 * gt ** 3)))
            else:
                act = gt / (1 + np.exp(-gt))
            f = (act * (h @ w['u'].T)) @ w['d'].T
            if w['pfn'] is not None:
                f = self.rms(f, w['pfn'])
            x = x + f
        return self.rms(x, self.out_norm) @ self.out.T


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('model')
    ap.add_argument('--tokens', required=True, help='prompt token ids, space-separated')
    ap.add_argument('--greedy', type=int, default=0, help='greedy tokens to generate after the prompt')
    ap.add_argument('--top', type=int, default=10)
    ap.add_argument('--kv', choices=['f16', 'f32'], default='f16')
    ap.add_argument('--ctx', type=int, help='the context the engine runs with (LongRoPE picks its factors by it; default: the model\'s)')
    ap.add_argument('--logits-out', help='write the last position logits as raw float32')
    a = ap.parse_args()
    m = Model(a.model, kv_f16=a.kv == 'f16', ctx=a.ctx)
    toks = [int(t) for t in a.tokens.split()]
    logits = m.forward(toks)[-1]
    if a.logits_out:
        logits.astype('<f4').tofile(a.logits_out)
    top = np.argsort(-logits, kind='stable')[:a.top]
    out = {'tokens': toks, 'top': [[int(i), float(logits[i])] for i in top]}
    if a.greedy:
        gen, margins, last = [], [], logits
        for _ in range(a.greedy):
            top2 = np.sort(last)[-2:]
            nxt = int(np.argmax(last))
            gen.append(nxt)
            margins.append(float(top2[1] - top2[0]))  # a small margin is a near tie
            last = m.forward([nxt])[-1]
        out['greedy'] = gen
        out['greedy_margins'] = margins
    json.dump(out, sys.stdout)
    print()


if __name__ == '__main__':
    main()
