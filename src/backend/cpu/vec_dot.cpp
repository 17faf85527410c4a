// Scalar row dot products (the reference for the SIMD kernels) and the dispatcher.
#include "backend/cpu/vec_dot.h"

#include "backend/cpu/gemm_amx.h"
#include "core/half.h"
#include "format/quant.h"
#include "format/quant_blocks.h"
#include "format/quant_decode.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace lamina {
namespace {

// Float weights in the SIMD kernels' order (vec_dot_avx2.cpp's dot_half): products by fma in 16
// lanes over 16-element steps, the lanes summed as hsum (l and l + 8, l and l + 4, then (0 + 2)
// + (1 + 3)), then the tail in order: the same bits on every tier.
template <class Load>
float dot_float16(int64_t n, Load a, const float* b) {
  float acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int l = 0; l < 16; ++l) acc[l] = std::fma(a(i + l), b[i + l], acc[l]);
  float h[8], r[4];
  for (int l = 0; l < 8; ++l) h[l] = acc[l] + acc[l + 8];
  for (int l = 0; l < 4; ++l) r[l] = h[l] + h[l + 4];
  float s = (r[0] + r[2]) + (r[1] + r[3]);
  for (; i < n; ++i) s += a(i) * b[i];
  return s;
}
float dot_f32(int64_t n, const void* w, const void* x) {
  const float* a = static_cast<const float*>(w);
  return dot_float16(n, [a](int64_t i) { return a[i]; }, static_cast<const float*>(x));
}
float dot_f16(int64_t n, const void* w, const void* x) {
  const uint16_t* a = static_cast<const uint16_t*>(w);
  return dot_float16(n, [a](int64_t i) { return f16_to_f32(a[i]); }, static_cast<const float*>(x));
}
float dot_bf16(int64_t n, const void* w, const void* x) {
  const uint16_t* a = static_cast<const uint16_t*>(w);
  return dot_float16(n, [a](int64_t i) { return bf16_to_f32(a[i]); }, static_cast<const float*>(x));
}
float dot_q4_0(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const block_q4_0*>(w);
  const auto* b = static_cast<const act_q8*>(x);
  float s = 0;
  for (int64_t i = 0; i < n / QK; ++i) {
    int sum = 0;
    for (int j = 0; j < 16; ++j)
      sum += ((a[i].qs[j] & 15) - 8) * b[i].qs[j] + ((a[i].qs[j] >> 4) - 8) * b[i].qs[j + 16];
    s = std::fma(float(sum), f16_to_f32(a[i].d) * b[i].d, s);  // the order vec_dot.h defines
  }
  return s;
}
float dot_q4_1(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const block_q4_1*>(w);
  const auto* b = static_cast<const act_q8s*>(x);
  float s = 0;
  for (int64_t i = 0; i < n / QK; ++i) {
    int sum = 0;
    for (int j = 0; j < 16; ++j) sum += (a[i].qs[j] & 15) * b[i].qs[j] + (a[i].qs[j] >> 4) * b[i].qs[j + 16];
    s = s + std::fma(f16_to_f32(a[i].d) * b[i].d, float(sum), f16_to_f32(a[i].m) * b[i].s);
  }
  return s;
}
float dot_q5_0(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const block_q5_0*>(w);
  const auto* b = static_cast<const act_q8*>(x);
  float s = 0;
  for (int64_t i = 0; i < n / QK; ++i) {
    uint32_t qh;
    std::memcpy(&qh, a[i].qh, 4);
    int sum = 0;
    for (int j = 0; j < 16; ++j) {
      const int lo = (a[i].qs[j] & 15) | int((qh >> j) & 1) << 4;
      const int hi = (a[i].qs[j] >> 4) | int((qh >> (j + 16)) & 1) << 4;
      sum += (lo - 16) * b[i].qs[j] + (hi - 16) * b[i].qs[j + 16];
    }
    s += f16_to_f32(a[i].d) * b[i].d * float(sum);
  }
  return s;
}
float dot_q5_1(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const block_q5_1*>(w);
  const auto* b = static_cast<const act_q8s*>(x);
  float s = 0;
  for (int64_t i = 0; i < n / QK; ++i) {
    uint32_t qh;
    std::memcpy(&qh, a[i].qh, 4);
    int sum = 0;
    for (int j = 0; j < 16; ++j) {
      const int lo = (a[i].qs[j] & 15) | int((qh >> j) & 1) << 4;
      const int hi = (a[i].qs[j] >> 4) | int((qh >> (j + 16)) & 1) << 4;
      sum += lo * b[i].qs[j] + hi * b[i].qs[j + 16];
    }
    s += f16_to_f32(a[i].d) * b[i].d * float(sum) + f16_to_f32(a[i].m) * b[i].s;
  }
  return s;
}
float dot_q8_0(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const block_q8_0*>(w);
  const auto* b = static_cast<const act_q8*>(x);
  float s = 0;
  for (int64_t i = 0; i < n / QK; ++i) {
    int sum = 0;
    for (int j = 0; j < QK; ++j) sum += a[i].qs[j] * b[i].qs[j];
    s = std::fma(float(sum), f16_to_f32(a[i].d) * b[i].d, s);
  }
  return s;
}
// Q4_K, and (kQ5) Q5_K: per 32-element sub-block the integer sum of q * x times its 6-bit scale,
// the mins against the activations' 16-element sums; Q5_K's fifth bit of element e is bit e / 32
// of qh[e % 32].
template <bool kQ5>
float dot_q45_K(int64_t n, const void* w, const void* x) {
  using Block = std::conditional_t<kQ5, block_q5_K, block_q4_K>;
  const auto* a = static_cast<const Block*>(w);
  const auto* b = static_cast<const block_q8_K*>(x);
  float s = 0;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    int sum = 0, sum_min = 0;
    for (int t = 0; t < 8; ++t) {
      uint8_t sc, m;
      q4k_scale_min(t, a[i].scales, &sc, &m);
      int st = 0;
      for (int l = 0; l < 32; ++l) {
        const int e = 32 * t + l;
        const uint8_t byte = a[i].qs[32 * (e / 64) + l];
        int q = (e % 64 < 32) ? (byte & 15) : (byte >> 4);
        if constexpr (kQ5) q |= ((a[i].qh[l] >> t) & 1) << 4;
        st += q * b[i].qs[e];
      }
      sum += sc * st;
      sum_min += m * (b[i].bsums[2 * t] + b[i].bsums[2 * t + 1]);
    }
    s += b[i].d * (f16_to_f32(a[i].d) * float(sum) - f16_to_f32(a[i].dmin) * float(sum_min));
  }
  return s;
}
float dot_q2_K(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const block_q2_K*>(w);
  const auto* b = static_cast<const block_q8_K*>(x);
  float s = 0;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    int sum = 0, sum_min = 0;
    for (int t = 0; t < 16; ++t) {
      int st = 0;
      for (int l16 = 0; l16 < 16; ++l16) {
        const int e = 16 * t + l16;
        st += ((a[i].qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3) * b[i].qs[e];
      }
      sum += (a[i].scales[t] & 15) * st;
      sum_min += (a[i].scales[t] >> 4) * b[i].bsums[t];
    }
    s += b[i].d * (f16_to_f32(a[i].d) * float(sum) - f16_to_f32(a[i].dmin) * float(sum_min));
  }
  return s;
}
float dot_q3_K(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const block_q3_K*>(w);
  const auto* b = static_cast<const block_q8_K*>(x);
  float s = 0;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    int sum = 0;
    for (int t = 0; t < 16; ++t) {
      int st = 0;
      for (int l16 = 0; l16 < 16; ++l16) {
        const int e = 16 * t + l16, nn = e / 128, j = (e % 128) / 32, l = e % 32;
        const int q = ((a[i].qs[32 * nn + l] >> (2 * j)) & 3) - (((a[i].hmask[l] >> (4 * nn + j)) & 1) ? 0 : 4);
        st += q * b[i].qs[e];
      }
      sum += q3k_scale(a[i].scales, t) * st;
    }
    s += b[i].d * (f16_to_f32(a[i].d) * float(sum));
  }
  return s;
}
// IQ4_XS against q8_K: per 32-element sub-block the integer sum of value[nibble] * x times its
// signed 6-bit scale.
float dot_iq4_xs(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const block_iq4_xs*>(w);
  const auto* b = static_cast<const block_q8_K*>(x);
  float s = 0;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    int sum = 0;
    for (int ib = 0; ib < 8; ++ib) {
      int st = 0;
      for (int e = 0; e < 32; ++e) st += iq4_value(q_nib(a[i].qs + 16 * ib, e)) * b[i].qs[32 * ib + e];
      sum += iq4xs_scale(a[i], ib) * st;
    }
    s += b[i].d * (f16_to_f32(a[i].d) * float(sum));
  }
  return s;
}
float dot_q6_K(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const block_q6_K*>(w);
  const auto* b = static_cast<const block_q8_K*>(x);
  float s = 0;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    int sum = 0;
    for (int g = 0; g < 16; ++g) {
      int sg = 0;
      for (int l16 = 0; l16 < 16; ++l16) {
        const int e = 16 * g + l16, nn = e / 128, k = (e % 128) / 32, l = e % 32;
        const uint8_t byte = a[i].ql[64 * nn + 32 * (k & 1) + l];
        const int q = ((k < 2 ? (byte & 15) : (byte >> 4)) | ((a[i].qh[32 * nn + l] >> (2 * k)) & 3) << 4) - 32;
        sg += q * b[i].qs[e];
      }
      sum += a[i].scales[g] * sg;
    }
    s += b[i].d * f16_to_f32(a[i].d) * float(sum);
  }
  return s;
}

// 8-bit blocks of 32 with an f32 scale (llama.cpp's Q8_0 rule: d = amax/127, round half away).
template <bool WithSum, class Block>
void quantize_q8(const float* x, Block* y, int64_t n) {
  for (int64_t i = 0; i < n / QK; ++i, x += QK) {
    float amax = 0;
    for (int j = 0; j < QK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.f, id = d ? 1.f / d : 0.f;
    int sum = 0;
    for (int j = 0; j < QK; ++j) {
      y[i].qs[j] = int8_t(std::lround(x[j] * id));
      sum += y[i].qs[j];
    }
    y[i].d = d;
    if constexpr (WithSum) y[i].s = d * float(sum);
  }
}

void quantize_q8_K(const float* x, block_q8_K* y, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    float amax = 0, maxv = 0;
    for (int j = 0; j < QK_K; ++j)
      if (std::fabs(x[j]) > amax) { amax = std::fabs(x[j]); maxv = x[j]; }
    if (amax == 0) {
      std::memset(&y[i], 0, sizeof y[i]);
      continue;
    }
    const float iscale = -127.f / maxv;
    for (int j = 0; j < QK_K; ++j) {
      const int v = int(std::nearbyint(iscale * x[j]));
      y[i].qs[j] = int8_t(v > 127 ? 127 : v);
    }
    for (int g = 0; g < QK_K / 16; ++g) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += y[i].qs[16 * g + j];
      y[i].bsums[g] = int16_t(sum);
    }
    y[i].d = 1.f / iscale;
  }
}

VecDot scalar_kernel(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return {ActType::F32, dot_f32};
    case GgmlType::F16: return {ActType::F32, dot_f16};
    case GgmlType::BF16: return {ActType::F32, dot_bf16};
    case GgmlType::Q4_0: return {ActType::Q8, dot_q4_0};
    case GgmlType::Q4_1: return {ActType::Q8S, dot_q4_1};
    case GgmlType::Q5_0: return {ActType::Q8, dot_q5_0};
    case GgmlType::Q5_1: return {ActType::Q8S, dot_q5_1};
    case GgmlType::Q8_0: return {ActType::Q8, dot_q8_0};
    case GgmlType::Q2_K: return {ActType::Q8K, dot_q2_K};
    case GgmlType::Q3_K: return {ActType::Q8K, dot_q3_K};
    case GgmlType::Q4_K: return {ActType::Q8K, dot_q45_K<false>};
    case GgmlType::Q5_K: return {ActType::Q8K, dot_q45_K<true>};
    case GgmlType::Q6_K: return {ActType::Q8K, dot_q6_K};
    case GgmlType::IQ4_XS: return {ActType::Q8K, dot_iq4_xs};
    default: return {ActType::F32, nullptr};  // dequantise-then-dot fallback
  }
}

}  // namespace

bool cpu_runs(CpuIsa isa) {
#if defined(__x86_64__)
  if (isa == CpuIsa::Scalar) return true;
  // F16C via CPUID (leaf 1, ECX bit 29): clang's __builtin_cpu_supports does not know "f16c".
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29));
  if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c)) return false;
  switch (isa) {
    case CpuIsa::Avx2: return true;
    case CpuIsa::AvxVnni:  // the VEX encoding: leaf 7 sub-leaf 1, EAX bit 4 (AVX2 usable says the OS saves YMM)
      return __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) && (eax & (1u << 4));
    case CpuIsa::Avx512:  // (the compiler's checks include the OS saving the ZMM state)
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
    case CpuIsa::Amx: return cpu_runs(CpuIsa::Avx512) && amx_usable();
    default: return false;
  }
#else
  return isa == CpuIsa::Scalar;
#endif
}

CpuIsa runnable_isa(CpuIsa want) {
  while (want != CpuIsa::Scalar && !cpu_runs(want)) want = CpuIsa(int(want) - 1);
  return want;
}

CpuIsa detect_isa() {
  static const CpuIsa isa = runnable_isa(CpuIsa::Amx);
  return isa;
}

const char* isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::Amx: return "amx";
    case CpuIsa::Avx512: return "avx512";
    case CpuIsa::AvxVnni: return "avx-vnni";
    case CpuIsa::Avx2: return "avx2";
    default: return "scalar";
  }
}

VecDot vec_dot_for(GgmlType t, CpuIsa isa) {
  VecDot v = scalar_kernel(t);
  if (isa >= CpuIsa::Avx2 && v.fn)
    if (VecDotFn f = avx2_kernel(t))
      v.fn = f, v.fn4c = avx2_kernel4c(t, &v.corr_bias), v.rows4c = avx2_rows4c(t), v.rows8c = avx2_rows8c(t);
  if (isa == CpuIsa::AvxVnni && v.fn)
    if (VecDotFn f = vnni_kernel(t))
      v.fn = f, v.fn4c = vnni_kernel4c(t, &v.corr_bias), v.rows4c = vnni_rows4c(t), v.rows8c = vnni_rows8c(t);
  if (isa >= CpuIsa::Avx512 && v.fn) {  // (not the VEX AVX-VNNI kernels: a tier above need not have them)
    if (VecDotFn f = avx512_kernel(t))
      v.fn = f, v.fn4c = avx512_kernel4c(t, &v.corr_bias), v.rows4c = avx512_rows4c(t), v.rows8c = avx512_rows8c(t);
    v.tile = avx512_tile(t);
  }
  return v;
}

std::optional<CpuIsa> parse_isa(std::string_view name) {
  if (name == "auto") return detect_isa();
  for (CpuIsa isa : {CpuIsa::Scalar, CpuIsa::Avx2, CpuIsa::AvxVnni, CpuIsa::Avx512, CpuIsa::Amx})
    if (name == isa_name(isa)) return isa;
  return std::nullopt;
}

void act_corrections(const void* xq, int64_t n, int bias, int32_t* corr) {
  const auto* b = static_cast<const act_q8*>(xq);
  for (int64_t i = 0; i < n / QK; ++i) {
    int32_t sum = 0;
    for (int j = 0; j < QK; ++j) sum += b[i].qs[j];
    corr[i] = -bias * sum;
  }
}

size_t act_row_bytes(ActType t, int64_t n) {
  switch (t) {
    case ActType::F32: return size_t(n) * sizeof(float);
    case ActType::Q8: return size_t(n / QK) * sizeof(act_q8);
    case ActType::Q8S: return size_t(n / QK) * sizeof(act_q8s);
    case ActType::Q8K: return size_t(n / QK_K) * sizeof(block_q8_K);
  }
  return 0;
}

void quantize_activations(ActType t, const float* x, void* dst, int64_t n) {
  if (t != ActType::F32 && detect_isa() >= CpuIsa::Avx2) return avx2_quantize_q8(t, x, dst, n);
  quantize_activations_portable(t, x, dst, n);
}

void quantize_activations_portable(ActType t, const float* x, void* dst, int64_t n) {
  switch (t) {
    case ActType::F32: std::memcpy(dst, x, size_t(n) * sizeof(float)); return;
    case ActType::Q8: return quantize_q8<false>(x, static_cast<act_q8*>(dst), n);
    case ActType::Q8S: return quantize_q8<true>(x, static_cast<act_q8s*>(dst), n);
    case ActType::Q8K: return quantize_q8_K(x, static_cast<block_q8_K*>(dst), n);
  }
}

void dequantize_activations(ActType t, const void* src, float* dst, int64_t n) {
  auto blocks = [&](auto* b) {
    for (int64_t i = 0; i < n / QK; ++i)
      for (int j = 0; j < QK; ++j) dst[i * QK + j] = b[i].d * float(b[i].qs[j]);
  };
  switch (t) {
    case ActType::F32: std::memcpy(dst, src, size_t(n) * sizeof(float)); return;
    case ActType::Q8: return blocks(static_cast<const act_q8*>(src));
    case ActType::Q8S: return blocks(static_cast<const act_q8s*>(src));
    case ActType::Q8K: return dequantize_row(GgmlType::Q8_K, src, dst, n);
  }
}

}  // namespace lamina
