// Reference quantisers. The legacy ones reproduce llama.cpp's quantize_row_*_ref bit for bit
// (formats.md §2.4); the K quants use a least-squares scale search of our own.
#include "core/error.h"
#include "core/half.h"
#include "format/quant.h"
#include "format/quant_blocks.h"
#include "format/quant_decode.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace lamina {
namespace {

// ---- legacy 32-element blocks ---------------------------------------------------------------

void q8_0(const float* x, block_q8_0* b) {
  float amax = 0;
  for (int e = 0; e < QK; ++e) amax = std::max(amax, std::fabs(x[e]));
  const float d = amax / 127.f, id = d ? 1.f / d : 0.f;
  b->d = f32_to_f16(d);
  for (int e = 0; e < QK; ++e) b->qs[e] = int8_t(std::roundf(x[e] * id));
}

void q8_1(const float* x, block_q8_1* b) {
  float amax = 0;
  for (int e = 0; e < QK; ++e) amax = std::max(amax, std::fabs(x[e]));
  const float d = amax / 127.f, id = d ? 1.f / d : 0.f;
  int sum = 0;
  for (int e = 0; e < QK; ++e) {
    b->qs[e] = int8_t(std::roundf(x[e] * id));
    sum += b->qs[e];
  }
  b->d = f32_to_f16(d);
  b->s = f32_to_f16(float(sum) * d);
}

// Signed value of largest magnitude (first one on ties).
float signed_absmax(const float* x, int n) {
  float amax = 0, m = 0;
  for (int e = 0; e < n; ++e)
    if (std::fabs(x[e]) > amax) { amax = std::fabs(x[e]); m = x[e]; }
  return m;
}

void q4_0(const float* x, block_q4_0* b) {
  const float d = signed_absmax(x, QK) / -8.f, id = d ? 1.f / d : 0.f;
  b->d = f32_to_f16(d);
  for (int j = 0; j < QK / 2; ++j) {
    const uint8_t a = uint8_t(std::min(15, int(int8_t(x[j] * id + 8.5f))));
    const uint8_t c = uint8_t(std::min(15, int(int8_t(x[j + 16] * id + 8.5f))));
    b->qs[j] = uint8_t(a | c << 4);
  }
}

void q4_1(const float* x, block_q4_1* b) {
  float lo = x[0], hi = x[0];
  for (int e = 1; e < QK; ++e) { lo = std::min(lo, x[e]); hi = std::max(hi, x[e]); }
  const float d = (hi - lo) / 15.f, id = d ? 1.f / d : 0.f;
  b->d = f32_to_f16(d);
  b->m = f32_to_f16(lo);
  for (int j = 0; j < QK / 2; ++j) {
    const uint8_t a = uint8_t(std::min(15, int(int8_t((x[j] - lo) * id + 0.5f))));
    const uint8_t c = uint8_t(std::min(15, int(int8_t((x[j + 16] - lo) * id + 0.5f))));
    b->qs[j] = uint8_t(a | c << 4);
  }
}

void q5_0(const float* x, block_q5_0* b) {
  const float d = signed_absmax(x, QK) / -16.f, id = d ? 1.f / d : 0.f;
  b->d = f32_to_f16(d);
  uint32_t qh = 0;
  for (int j = 0; j < QK / 2; ++j) {
    const int a = std::min(31, int(int8_t(x[j] * id + 16.5f)));
    const int c = std::min(31, int(int8_t(x[j + 16] * id + 16.5f)));
    b->qs[j] = uint8_t((a & 15) | (c & 15) << 4);
    qh |= uint32_t((a >> 4) & 1) << j;
    qh |= uint32_t((c >> 4) & 1) << (j + 16);
  }
  std::memcpy(b->qh, &qh, 4);
}

void q5_1(const float* x, block_q5_1* b) {
  float lo = x[0], hi = x[0];
  for (int e = 1; e < QK; ++e) { lo = std::min(lo, x[e]); hi = std::max(hi, x[e]); }
  const float d = (hi - lo) / 31.f, id = d ? 1.f / d : 0.f;
  b->d = f32_to_f16(d);
  b->m = f32_to_f16(lo);
  uint32_t qh = 0;
  for (int j = 0; j < QK / 2; ++j) {
    const int a = int(int8_t((x[j] - lo) * id + 0.5f));
    const int c = int(int8_t((x[j + 16] - lo) * id + 0.5f));
    b->qs[j] = uint8_t((a & 15) | (c & 15) << 4);
    qh |= uint32_t((a >> 4) & 1) << j;
    qh |= uint32_t((c >> 4) & 1) << (j + 16);
  }
  std::memcpy(b->qh, &qh, 4);
}

// ---- K quants -------------------------------------------------------------------------------

// Round to nearest (ties to even) for |v| < 2^22, by the float magic-number trick (ggml's
// nearest_int): adding 1.5 * 2^23 leaves the rounded integer in the low mantissa bits.
inline int nearest(float v) {
  const float f = v + 12582912.f;
  int32_t i;
  std::memcpy(&i, &f, 4);
  return (i & 0x007FFFFF) - 0x00400000;
}

// Fits x[i] ~ scale*q[i] - mn with q in [0, nmax], weights w: tries a range of inverse scales
// around nmax/(max-min), solves the weighted least-squares (scale, mn) for each quantisation,
// and keeps the best. Returns scale; *mn_out >= 0.
float fit_scale_min(const float* x, const float* w, int n, int nmax, uint8_t* q, float* mn_out) {
  float lo = x[0], hi = x[0];
  for (int i = 1; i < n; ++i) { lo = std::min(lo, x[i]); hi = std::max(hi, x[i]); }
  lo = std::min(lo, 0.f);
  if (hi <= lo) {
    std::fill(q, q + n, uint8_t(0));
    *mn_out = -lo;
    return 0.f;
  }
  float best_err = INFINITY, best_scale = (hi - lo) / float(nmax), best_min = lo;  // err without sum w x^2
  for (int i = 0; i < n; ++i) q[i] = uint8_t(std::clamp(nearest((x[i] - lo) / best_scale), 0, nmax));
  uint8_t tmp[256];
  // 9 candidate scales. With 21 (llama.cpp's count) a 7B q4_K gen-model took 98.6 s on 16 cores;
  // the relative rmse on Gaussian data went from 0.07747 (21) to 0.07764 (9).
  for (int step = -4; step <= 4; ++step) {
    const float iscale = (float(nmax) + 0.25f * float(step)) / (hi - lo);
    float sw = 0, sl = 0, sx = 0, sl2 = 0, slx = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest(iscale * (x[i] - lo)), 0, nmax);
      tmp[i] = uint8_t(l);
      sw += w[i]; sl += w[i] * l; sx += w[i] * x[i]; sl2 += w[i] * l * l; slx += w[i] * l * x[i];
    }
    const float det = sw * sl2 - sl * sl;
    if (det <= 0) continue;
    float scale = (sw * slx - sx * sl) / det;
    float mn = (sl2 * sx - sl * slx) / det;
    if (mn > 0) {  // the offset must stay <= 0: refit the scale alone with mn = 0
      mn = 0;
      scale = sl2 > 0 ? slx / sl2 : 0;
    }
    // sum w (scale*l + mn - x)^2 from the sums above (the constant sum w x^2 left out).
    const float err = scale * scale * sl2 + 2 * scale * mn * sl - 2 * scale * slx + mn * mn * sw - 2 * mn * sx;
    if (err < best_err) {
      best_err = err; best_scale = scale; best_min = mn;
      std::copy(tmp, tmp + n, q);
    }
  }
  *mn_out = -best_min;
  return best_scale;
}

// Q4_K and Q5_K (nmax 15 or 31): per 32-element sub-block a fitted scale and min, both stored as
// 6-bit multiples of the super-block's d and dmin; the quants re-fitted to the stored scales.
// Writes the header (d, dmin, scales) and returns the quants L[256] in 0..nmax.
void k_scales_and_quants(const float* x, int nmax, uint16_t* d_out, uint16_t* dmin_out, uint8_t* scales_out, uint8_t* L) {
  float scales[8], mins[8], w[32];
  float sum2 = 0;
  for (int i = 0; i < QK_K; ++i) sum2 += x[i] * x[i];
  const float av = std::sqrt(sum2 / QK_K);
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    for (int l = 0; l < 32; ++l) w[l] = av + std::fabs(x[32 * j + l]);
    scales[j] = fit_scale_min(x + 32 * j, w, 32, nmax, L + 32 * j, &mins[j]);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  const float d = max_scale / 63.f, dmin = max_min / 63.f;
  uint8_t ls[8], lm[8];
  for (int j = 0; j < 8; ++j) {
    ls[j] = uint8_t(std::min(63, d > 0 ? nearest(scales[j] / d) : 0));
    lm[j] = uint8_t(std::min(63, dmin > 0 ? nearest(mins[j] / dmin) : 0));
  }
  std::memset(scales_out, 0, K_SCALE_SIZE);
  for (int j = 0; j < 4; ++j) { scales_out[j] = ls[j]; scales_out[j + 4] = lm[j]; }
  for (int j = 4; j < 8; ++j) {
    scales_out[j + 4] = uint8_t((ls[j] & 15) | (lm[j] & 15) << 4);
    scales_out[j - 4] |= uint8_t((ls[j] >> 4) << 6);
    scales_out[j] |= uint8_t((lm[j] >> 4) << 6);
  }
  *d_out = f32_to_f16(d);
  *dmin_out = f32_to_f16(dmin);
  // Re-quantise against the scales as stored (rounded to 6 bits and f16).
  const float df = f16_to_f32(*d_out), dminf = f16_to_f32(*dmin_out);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    q4k_scale_min(j, scales_out, &sc, &m);
    const float ds = df * sc, dm = dminf * m;
    for (int l = 0; l < 32; ++l)
      L[32 * j + l] = uint8_t(ds > 0 ? std::clamp(nearest((x[32 * j + l] + dm) / ds), 0, nmax) : 0);
  }
}

void q4_K(const float* x, block_q4_K* b) {
  uint8_t L[QK_K];
  k_scales_and_quants(x, 15, &b->d, &b->dmin, b->scales, L);
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) b->qs[32 * c + l] = uint8_t(L[64 * c + l] | L[64 * c + 32 + l] << 4);
}

// Q5_K: Q4_K's nibbles (the low 4 bits) and the fifth bit of element e as bit e / 32 of qh[e % 32].
void q5_K(const float* x, block_q5_K* b) {
  uint8_t L[QK_K];
  k_scales_and_quants(x, 31, &b->d, &b->dmin, b->scales, L);
  std::memset(b->qh, 0, sizeof b->qh);
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) b->qs[32 * c + l] = uint8_t((L[64 * c + l] & 15) | (L[64 * c + 32 + l] & 15) << 4);
  for (int e = 0; e < QK_K; ++e) b->qh[e % 32] |= uint8_t((L[e] >> 4) << (e / 32));
}

// Q2_K: per 16-element sub-block a fitted scale and min (q in 0..3), both stored as 4-bit
// multiples of the super-block's d and dmin; element e = 128n + 32j + l is bits 2j of qs[32n + l].
void q2_K(const float* x, block_q2_K* b) {
  float scales[16], mins[16], w[16];
  uint8_t L[QK_K];
  float max_scale = 0, max_min = 0;
  for (int t = 0; t < 16; ++t) {
    for (int l = 0; l < 16; ++l) w[l] = std::fabs(x[16 * t + l]);
    scales[t] = fit_scale_min(x + 16 * t, w, 16, 3, L + 16 * t, &mins[t]);
    max_scale = std::max(max_scale, scales[t]);
    max_min = std::max(max_min, mins[t]);
  }
  const float d = max_scale / 15.f, dmin = max_min / 15.f;
  b->d = f32_to_f16(d);
  b->dmin = f32_to_f16(dmin);
  const float df = f16_to_f32(b->d), dminf = f16_to_f32(b->dmin);
  for (int t = 0; t < 16; ++t) {
    const int ls = std::min(15, df > 0 ? nearest(scales[t] / df) : 0), lm = std::min(15, dminf > 0 ? nearest(mins[t] / dminf) : 0);
    b->scales[t] = uint8_t(ls | lm << 4);
    const float ds = df * ls, dm = dminf * lm;
    for (int l = 0; l < 16; ++l)
      L[16 * t + l] = uint8_t(ds > 0 ? std::clamp(nearest((x[16 * t + l] + dm) / ds), 0, 3) : 0);
  }
  std::memset(b->qs, 0, sizeof b->qs);
  for (int e = 0; e < QK_K; ++e) b->qs[32 * (e / 128) + e % 32] |= uint8_t(L[e] << (2 * ((e % 128) / 32)));
}

// Symmetric fit x ~ scale*q, q in [-nmax, nmax-1], weights x^2; returns the scale.
float fit_scale_sym(const float* x, int n, int nmax) {
  const float m = signed_absmax(x, n);
  if (m == 0) return 0;
  float best = 0, best_scale = -m / float(nmax);
  for (int step = -9; step <= 9; ++step) {
    const float iscale = -(float(nmax) + 0.1f * float(step)) / m;
    float slx = 0, sl2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest(iscale * x[i]), -nmax, nmax - 1);
      const float w = x[i] * x[i];
      slx += w * x[i] * l;
      sl2 += w * l * l;
    }
    if (sl2 > 0 && slx * slx > best * sl2) {
      best = slx * slx / sl2;
      best_scale = slx / sl2;
    }
  }
  return best_scale;
}

// The symmetric scales of a super-block's 16 sub-blocks of 16 (fit_scale_sym with levels nmax)
// into scales; returns the one of largest magnitude (the first such), 0 for an all-zero block.
float fit_sub_scales(const float* x, int nmax, float* scales) {
  float max_abs = 0, max_scale = 0;
  for (int t = 0; t < 16; ++t) {
    scales[t] = fit_scale_sym(x + 16 * t, 16, nmax);
    if (std::fabs(scales[t]) > max_abs) max_abs = std::fabs(scales[t]), max_scale = scales[t];
  }
  return max_scale;
}

// Q3_K: per 16-element sub-block a symmetric scale (q in -4..3) stored as a 6-bit signed
// multiple of d (offset 32, packed into 12 bytes); q + 4's low 2 bits go where Q2_K's do and its
// bit 2 to bit 4n + j of hmask[l] (set: q = low, clear: q = low - 4).
void q3_K(const float* x, block_q3_K* b) {
  float scales[16];
  const float max_scale = fit_sub_scales(x, 4, scales), max_abs = std::fabs(max_scale);
  std::memset(b, 0, sizeof *b);
  uint8_t u[16];  // the stored 6-bit scales, sc + 32
  const float iscale = max_abs > 0 ? -32.f / max_scale : 0.f;
  b->d = f32_to_f16(max_abs > 0 ? 1.f / iscale : 0.f);
  for (int t = 0; t < 16; ++t) u[t] = uint8_t(std::clamp(nearest(iscale * scales[t]), -32, 31) + 32);
  for (int t = 0; t < 16; ++t) {
    if (t < 8) b->scales[t] |= uint8_t(u[t] & 15);
    else b->scales[t - 8] |= uint8_t((u[t] & 15) << 4);
    b->scales[8 + t % 4] |= uint8_t((u[t] >> 4) << (2 * (t / 4)));
  }
  const float d = f16_to_f32(b->d);
  for (int e = 0; e < QK_K; ++e) {
    const float ds = d * float(int(u[e / 16]) - 32);
    const int q = ds != 0 ? std::clamp(nearest(x[e] / ds), -4, 3) : 0;
    const int n = e / 128, j = (e % 128) / 32, l = e % 32;
    b->qs[32 * n + l] |= uint8_t(((q + 4) & 3) << (2 * j));
    if (q >= 0) b->hmask[l] |= uint8_t(1 << (4 * n + j));
  }
}

// ---- IQ4 -----------------------------------------------------------------------------------

// The table index whose value is nearest v.
int iq4_nearest(float v) {
  int best = 0;
  float err = INFINITY;
  for (int i = 0; i < 16; ++i)
    if (const float e = std::fabs(v - float(iq4_value(i))); e < err) err = e, best = i;
  return best;
}

// Fits x ~ d * value[idx] over n elements: the largest |x| put at either end of the table, each
// refined by least squares over its indices; the scale of least squared error. Returns d.
float fit_iq4(const float* x, int n, uint8_t* idx) {
  const float m = signed_absmax(x, n);
  std::fill(idx, idx + n, uint8_t(iq4_nearest(0.f)));
  if (m == 0) return 0.f;
  float best_d = 0, best_err = INFINITY;
  uint8_t tmp[32];
  for (const float end : {-127.f, -120.f, -113.f, 113.f, 106.f, 100.f}) {
    float d = m / end;
    for (int pass = 0; pass < 2; ++pass) {
      float sxv = 0, svv = 0;
      for (int i = 0; i < n; ++i) {
        tmp[i] = uint8_t(iq4_nearest(x[i] / d));
        const float v = float(iq4_value(tmp[i]));
        sxv += x[i] * v, svv += v * v;
      }
      if (pass == 0 && svv > 0) d = sxv / svv;  // refit once, then re-index
    }
    float err = 0;
    for (int i = 0; i < n; ++i) err += (x[i] - d * float(iq4_value(tmp[i]))) * (x[i] - d * float(iq4_value(tmp[i])));
    if (err < best_err) best_err = err, best_d = d, std::copy(tmp, tmp + n, idx);
  }
  return best_d;
}

void iq4_nl(const float* x, block_iq4_nl* b) {
  uint8_t idx[QK];
  b->d = f32_to_f16(fit_iq4(x, QK, idx));
  const float d = f16_to_f32(b->d);
  for (int j = 0; j < QK; ++j) idx[j] = uint8_t(d != 0 ? iq4_nearest(x[j] / d) : iq4_nearest(0.f));
  for (int j = 0; j < QK / 2; ++j) b->qs[j] = uint8_t(idx[j] | idx[j + 16] << 4);
}

// IQ4_XS: each 32-element sub-block fitted as an IQ4_NL block, its scale then stored as a 6-bit
// signed multiple (ls - 32) of the super-block's d.
void iq4_xs(const float* x, block_iq4_xs* b) {
  uint8_t idx[QK_K];
  float dl[8], max_abs = 0, max_dl = 0;
  for (int ib = 0; ib < 8; ++ib) {
    dl[ib] = fit_iq4(x + 32 * ib, 32, idx + 32 * ib);
    if (std::fabs(dl[ib]) > max_abs) max_abs = std::fabs(dl[ib]), max_dl = dl[ib];
  }
  std::memset(b, 0, sizeof *b);
  b->d = f32_to_f16(max_abs > 0 ? max_dl / -32.f : 0.f);
  const float d = f16_to_f32(b->d);
  for (int ib = 0; ib < 8; ++ib) {
    const int ls = d != 0 ? std::clamp(nearest(dl[ib] / d), -32, 31) : 0;
    b->scales_l[ib / 2] |= uint8_t(((ls + 32) & 15) << (4 * (ib % 2)));
    b->scales_h = uint16_t(b->scales_h | (((ls + 32) >> 4) << (2 * ib)));
    const float ds = d * float(ls);
    for (int j = 0; j < 32; ++j) idx[32 * ib + j] = uint8_t(ds != 0 ? iq4_nearest(x[32 * ib + j] / ds) : iq4_nearest(0.f));
    for (int j = 0; j < 16; ++j) b->qs[16 * ib + j] = uint8_t(idx[32 * ib + j] | idx[32 * ib + j + 16] << 4);
  }
}

void q6_K(const float* x, block_q6_K* b) {
  float scales[16];
  const float max_scale = fit_sub_scales(x, 32, scales), max_abs = std::fabs(max_scale);
  int8_t L[QK_K];
  if (max_abs == 0) {
    std::memset(b, 0, sizeof *b);
    std::memset(b->ql, 0x00, sizeof b->ql);
    for (auto& q : L) q = 32;  // value 0
  } else {
    const float iscale = -128.f / max_scale;
    b->d = f32_to_f16(1.f / iscale);
    for (int j = 0; j < 16; ++j) b->scales[j] = int8_t(std::min(127, nearest(iscale * scales[j])));
    const float d = f16_to_f32(b->d);
    for (int j = 0; j < 16; ++j) {
      const float ds = d * b->scales[j];
      for (int l = 0; l < 16; ++l) {
        const int q = ds != 0 ? std::clamp(nearest(x[16 * j + l] / ds), -32, 31) : 0;
        L[16 * j + l] = int8_t(q + 32);
      }
    }
  }
  for (int n = 0; n < 2; ++n)
    for (int l = 0; l < 32; ++l) {
      const int q1 = L[128 * n + l], q2 = L[128 * n + l + 32];
      const int q3 = L[128 * n + l + 64], q4 = L[128 * n + l + 96];
      b->ql[64 * n + l] = uint8_t((q1 & 15) | (q3 & 15) << 4);
      b->ql[64 * n + l + 32] = uint8_t((q2 & 15) | (q4 & 15) << 4);
      b->qh[32 * n + l] = uint8_t((q1 >> 4) | (q2 >> 4) << 2 | (q3 >> 4) << 4 | (q4 >> 4) << 6);
    }
}

template <class Block, void (*F)(const float*, Block*), int N>
void blocks(const float* x, void* dst, int64_t n) {
  Block* b = static_cast<Block*>(dst);
  for (int64_t i = 0; i < n / N; ++i) F(x + i * N, b + i);
}

}  // namespace

bool can_quantize(GgmlType t) {
  switch (t) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16: case GgmlType::Q8_0:
    case GgmlType::Q8_1: case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q5_0:
    case GgmlType::Q5_1: case GgmlType::Q2_K: case GgmlType::Q3_K: case GgmlType::Q4_K: case GgmlType::Q5_K:
    case GgmlType::Q6_K: case GgmlType::IQ4_NL: case GgmlType::IQ4_XS: return true;
    default: return false;
  }
}

void quantize_row(GgmlType t, const float* x, void* dst, int64_t n) {
  const TypeTraits& tr = traits(t);
  if (n % tr.block_elems != 0)
    fail("quantize_row: {} elements is not a multiple of the {} block size {}", n, tr.name, tr.block_elems);
  switch (t) {
    case GgmlType::F32: std::memcpy(dst, x, size_t(n) * 4); return;
    case GgmlType::F16: {
      uint16_t* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = f32_to_f16(x[i]);
      return;
    }
    case GgmlType::BF16: {
      uint16_t* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = f32_to_bf16(x[i]);
      return;
    }
    case GgmlType::Q8_0: return blocks<block_q8_0, q8_0, QK>(x, dst, n);
    case GgmlType::Q8_1: return blocks<block_q8_1, q8_1, QK>(x, dst, n);
    case GgmlType::Q4_0: return blocks<block_q4_0, q4_0, QK>(x, dst, n);
    case GgmlType::Q4_1: return blocks<block_q4_1, q4_1, QK>(x, dst, n);
    case GgmlType::Q5_0: return blocks<block_q5_0, q5_0, QK>(x, dst, n);
    case GgmlType::Q5_1: return blocks<block_q5_1, q5_1, QK>(x, dst, n);
    case GgmlType::Q2_K: return blocks<block_q2_K, q2_K, QK_K>(x, dst, n);
    case GgmlType::Q3_K: return blocks<block_q3_K, q3_K, QK_K>(x, dst, n);
    case GgmlType::Q4_K: return blocks<block_q4_K, q4_K, QK_K>(x, dst, n);
    case GgmlType::Q5_K: return blocks<block_q5_K, q5_K, QK_K>(x, dst, n);
    case GgmlType::Q6_K: return blocks<block_q6_K, q6_K, QK_K>(x, dst, n);
    case GgmlType::IQ4_NL: return blocks<block_iq4_nl, iq4_nl, QK>(x, dst, n);
    case GgmlType::IQ4_XS: return blocks<block_iq4_xs, iq4_xs, QK_K>(x, dst, n);
    default: break;
  }
  fail("quantize_row: no quantiser for type {}", tr.name);
}

void q5_0_to_q8_0(const void* src, void* dst, int64_t n_blocks) {
  const auto* in = static_cast<const block_q5_0*>(src);
  auto* out = static_cast<block_q8_0*>(dst);
  for (int64_t b = 0; b < n_blocks; ++b) {
    uint32_t qh;
    std::memcpy(&qh, in[b].qh, 4);
    out[b].d = in[b].d;
    for (int e = 0; e < QK; ++e) {  // element e: nibble e % 16 of qs (low halves first), bit e of qh
      const int nib = e < QK / 2 ? in[b].qs[e] & 15 : in[b].qs[e - QK / 2] >> 4;
      out[b].qs[e] = int8_t((nib | int((qh >> e) & 1u) << 4) - 16);
    }
  }
}

void iq4_nl_to_q8_0(const void* src, void* dst, int64_t n_blocks) {
  const auto* in = static_cast<const block_iq4_nl*>(src);
  auto* out = static_cast<block_q8_0*>(dst);
  for (int64_t i = 0; i < n_blocks; ++i) {
    out[i].d = in[i].d;
    for (int j = 0; j < QK; ++j) out[i].qs[j] = int8_t(iq4_value(q_nib(in[i].qs, j)));
  }
}

void to_q8_0(GgmlType t, const void* src, void* dst, int64_t n_blocks) {
  if (t == GgmlType::Q5_0) return q5_0_to_q8_0(src, dst, n_blocks);
  if (t == GgmlType::IQ4_NL) return iq4_nl_to_q8_0(src, dst, n_blocks);
  fail("to_q8_0: {} is not held as q8_0", type_name(t));
}

}  // namespace lamina
