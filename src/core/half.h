// IEEE binary16 and bfloat16 conversions, bit-exact with ggml's scalar reference:
// f32->f16 rounds to nearest even; f32->bf16 rounds to nearest even (NaN stays a quiet NaN).
// Usable from host and device code (pure integer arithmetic; no intrinsics needed).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define LAMINA_HD __host__ __device__ __forceinline__
#else
#define LAMINA_HD inline
#endif

namespace lamina {

LAMINA_HD uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

LAMINA_HD float bits_f32(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

LAMINA_HD float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t em = h & 0x7FFFu;
  if (em - 0x0400u < 0x7800u) return bits_f32(sign | ((em << 13) + 0x38000000u));  // normal numbers

  const uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  if (exp == 0x1F) return bits_f32(sign | 0x7F800000u | (mant << 13));  // inf / nan
  if (exp == 0) {
    if (mant == 0) return bits_f32(sign);                                 // +-0
    // subnormal: value = mant * 2^-24
    float v = float(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

LAMINA_HD uint16_t f32_to_f16(float f) {
  const uint32_t x = f32_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7FFFFFFFu;
  if (ax >= 0x7F800000u) {                                  // inf or nan
    return uint16_t(sign | 0x7C00u | (ax > 0x7F800000u ? 0x200u | ((ax >> 13) & 0x3FFu) : 0u));
  }
  if (ax >= 0x477FF000u) return uint16_t(sign | 0x7C00u);    // rounds to >= 65520: overflow
  if (ax < 0x38800000u) {                                    // result is subnormal or zero
    if (ax < 0x33000000u) return uint16_t(sign);             // < 2^-25: rounds to zero
    const uint32_t e = ax >> 23;
    const uint32_t m = (ax & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126u - e;                          // 14..24 (value = m * 2^(e-150))
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return uint16_t(sign | q);
  }
  // normal: rebias exponent, round mantissa 23 -> 10 bits to nearest even
  uint32_t v = ((ax >> 23) - 112u) << 10 | ((ax >> 13) & 0x3FFu);
  const uint32_t rem = ax & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (v & 1u))) ++v;   // may carry into exponent: correct
  return uint16_t(sign | v);
}

LAMINA_HD float bf16_to_f32(uint16_t h) { return bits_f32(uint32_t(h) << 16); }

LAMINA_HD uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((u >> 16) | 64u);  // quiet nan
  u += 0x7FFFu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

}  // namespace lamina
