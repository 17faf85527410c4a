// dev/ probe (not built, not shipped): q2_K's batch-1 GEMV on int8 mma.sync m16n8k32 over lamina's
// repacked k23 planes (gemv_k23.cuh), measured against q_dp4a in the sixty-ninth session
// (docs/benchmarks.md). Standalone: nvcc -O3 -arch=sm_90a -std=c++17 -o q2mma q2k-mma-probe.cu,
// then ./q2mma N K REPS (checks against an fp64 reference, times with events, copy bandwidth).
//
// The idea: the MMA's 8 n columns are the 8 sub-blocks (16 elements) of a 128-element tile. B
// column t is x masked to sub-block t, so C[row][t] is sub-block t's integer sum and every C
// element is used; a lane's C columns 2q, 2q+1 are block q's two halves (one x step, one scale
// byte pair). x's largest element rides as signed base-256 digits in B fragments of their own,
// as q_mma does. Against q_dp4a: 8 dp4a a row-chunk become 2 MMAs, and the x side (here a table
// of B fragments in shared memory) is shared by 16 rows.
//
// Result (H200, one call): correct, but slower at every shape: 128256 x 4096 104.35 us against
// q_dp4a's 79.61, 14336 x 4096 31.55 against 11.20. ncu at 14336 x 4096: L1/TEX throughput 85 %,
// 65 % of the stall cycles waiting on L1TEX: each 4-byte load of a lane's A words touches 8 rows
// (8 lines, 8 wavefronts for 128 bytes) where q_dp4a's 8-byte chunk loads cover 256 contiguous
// bytes of one row, and the B fragments cost 5 16-byte shared loads a tile. Its pass loop also
// issues 1.7 instructions a weight against q_dp4a's 2.1: the per-sub-block scale and min work
// (q2_K's 4-bit scale and min per 16 weights) is the same in both, so the MMA saves only the dp4a.
// What it would need: a weight layout in MMA fragment order (a lane's 16 bytes contiguous), which
// the prompt GEMMs and dequant_repacked would have to read too.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#define CK(x)                                                                      \
  do {                                                                             \
    cudaError_t e_ = (x);                                                          \
    if (e_ != cudaSuccess) {                                                       \
      fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      exit(1);                                                                     \
    }                                                                              \
  } while (0)

struct X8Facts {
  float d;
  int32_t m, big, sum;
};
static size_t x8_bytes(int64_t k) { return size_t(k) + size_t(k / 32) * 16; }

__device__ __forceinline__ void mma_s8(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t ldnc(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}

// Per tile (128 elements) in shared memory: for slots l = 0..7 (the lanes whose B is not zero:
// lane (g, q) with g == q is slot q, b0; g == q + 4 is slot 4 + q, b1), 8 words (b0, b1 of MMAs
// j = 0..3) of the main B, of the d1 B and of the d2 B; then per block b (0..3) {d, sum half 0,
// sum half 1, has_d2 of the tile}.
constexpr int kTileWords = 3 * 8 * 8 + 4 * 4;  // 208 words = 832 bytes

__global__ void build_table(const uint8_t* __restrict__ x8, int64_t k, uint32_t* __restrict__ tab) {
  // one thread per (tile, block): 4 blocks a tile
  const int64_t nb = k / 32;
  for (int64_t blk = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; blk < nb; blk += int64_t(gridDim.x) * blockDim.x) {
    const int64_t T = blk / 4;
    const int b = int(blk % 4);
    uint32_t* t = tab + T * kTileWords;
    const int8_t* q = reinterpret_cast<const int8_t*>(x8) + blk * 32;
    const X8Facts f = reinterpret_cast<const X8Facts*>(x8 + k)[blk];
    const int d0 = int(int8_t(f.big & 0xFF)), r1 = (f.big - d0) >> 8;
    const int d1 = int(int8_t(r1 & 0xFF)), d2 = (r1 - d1) >> 8;
    for (int h = 0; h < 2; ++h) {
      const int s = 2 * b + h;  // sub-block of the tile = its slot
      for (int j = 0; j < 4; ++j) {
        uint32_t w = 0, w1 = 0, w2 = 0;
        for (int i = 0; i < 4; ++i) {
          const int e = 16 * h + 4 * j + i;  // element in the block
          uint32_t byte = uint8_t(q[e]);
          if (e == f.m) {
            byte |= uint32_t(d0 & 0xFF);
            w1 |= uint32_t(d1 & 0xFF) << (8 * i);
            w2 |= uint32_t(d2 & 0xFF) << (8 * i);
          }
          w |= byte << (8 * i);
        }
        const int lo = s < 4 ? 0 : 1;  // b0 for slots 0..3, b1 for 4..7
        for (int set = 0; set < 3; ++set) {
          uint32_t* p = t + set * 64 + s * 8 + 2 * j;
          p[lo] = set == 0 ? w : set == 1 ? w1 : w2;
          p[1 - lo] = 0;
        }
      }
    }
    int s0 = 0, s1 = 0;
    for (int e = 0; e < 16; ++e) s0 += q[e], s1 += q[16 + e];
    if (f.m < 16) s0 += f.big;
    else s1 += f.big;
    uint32_t* e = t + 192 + 4 * b;
    e[0] = __float_as_uint(f.d);
    e[1] = uint32_t(s0);
    e[2] = uint32_t(s1);
    e[3] = 0;
  }
}
__global__ void table_flags(int64_t k, uint32_t* __restrict__ tab) {
  const int64_t nt = k / 128;
  for (int64_t T = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; T < nt; T += int64_t(gridDim.x) * blockDim.x) {
    uint32_t* t = tab + T * kTileWords;
    uint32_t any = 0;
    for (int i = 0; i < 64; ++i) any |= t[128 + i];
    for (int b = 0; b < 4; ++b) t[192 + 4 * b + 3] = any != 0;
  }
}

// One unit = one super-block (256 elements, two tiles) of a lane's rows g and g + 8.
struct Unit {
  uint32_t w[2][4];  // [tile][row g sub q, row g sub 4+q, row g8 sub q, row g8 sub 4+q]
  uint32_t sc[2][2];  // [tile][row g, row g8]: the scale bytes of subs 2q, 2q+1
  uint32_t dd[2];     // (d, dmin) f16 pair of rows g, g8
};

template <int kWarps>
__global__ void __launch_bounds__(kWarps * 32, 1)
    q2k_mma(const uint8_t* __restrict__ w, const uint32_t* __restrict__ gtab, float* __restrict__ y, int64_t n, int64_t k) {
  extern __shared__ __align__(16) uint32_t stab[];
  const int nt = int(k / 128);
  // copy the x table into shared memory (zeros after it for the lanes whose B is zero)
  {
    const int words = nt * kTileWords;
    const uint4* src = reinterpret_cast<const uint4*>(gtab);
    uint4* dst = reinterpret_cast<uint4*>(stab);
    for (int i = threadIdx.x; i < words / 4; i += blockDim.x) dst[i] = src[i];
    for (int i = words + threadIdx.x; i < words + 192; i += blockDim.x) stab[i] = 0;  // (a zero B for lanes whose B is zero)
  }
  __syncthreads();
  const int lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  const int slot = g == q ? q : g == q + 4 ? 4 + q : -1;
  const uint32_t* zero = stab + nt * kTileWords;
  // this lane's B words: tile T at bbase + T * bstride (+ 64 for d1, + 128 for d2)
  const uint32_t* bbase = slot >= 0 ? stab + slot * 8 : zero;
  const int bstride = slot >= 0 ? kTileWords : 0;
  const int64_t subs = k / 16;  // words (and scale bytes) per row
  const uint32_t* low = reinterpret_cast<const uint32_t*>(w);
  const uint8_t* scp = w + size_t(n) * size_t(k) / 4;
  const uint32_t* dp = reinterpret_cast<const uint32_t*>(scp + size_t(n) * size_t(subs));
  const int64_t groups = n / 16;
  const int64_t warp0 = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32, nwarps = int64_t(gridDim.x) * kWarps;
  const int units = int(k / 256);  // a multiple of 2 (k a multiple of 512)

  // rows g and g + 8 of group G: 32-bit element indices into the planes (this lane's words, scale
  // pairs, (d, dmin)); rows 8 further are 8 subs / 8 units on.
  struct Rows {
    uint32_t w, s, d;
  };
  const uint32_t w8 = uint32_t(8 * subs), s8 = uint32_t(4 * subs), d8 = uint32_t(8 * units);
  auto rows = [&](int64_t G) {
    const uint32_t rg = uint32_t(16 * min(G, groups - 1) + g);
    return Rows{rg * uint32_t(subs) + q, rg * uint32_t(subs / 2) + q, rg * uint32_t(units)};
  };
  const unsigned short* sc16 = reinterpret_cast<const unsigned short*>(scp);
  auto load = [&](const Rows& r, int U, Unit& u) {
    const uint32_t* p0 = low + (r.w + 16 * U);
    const uint32_t* p8 = low + (r.w + w8 + 16 * U);
    const unsigned short* q0 = sc16 + (r.s + 8 * U);
    const unsigned short* q8 = sc16 + (r.s + s8 + 8 * U);
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      u.w[t][0] = ldnc(p0 + 8 * t), u.w[t][1] = ldnc(p0 + 8 * t + 4);
      u.w[t][2] = ldnc(p8 + 8 * t), u.w[t][3] = ldnc(p8 + 8 * t + 4);
      u.sc[t][0] = __ldg(q0 + 4 * t), u.sc[t][1] = __ldg(q8 + 4 * t);
    }
    u.dd[0] = __ldg(dp + (r.d + U)), u.dd[1] = __ldg(dp + (r.d + d8 + U));
  };

  float acc0 = 0.f, acc1 = 0.f;  // rows g, g + 8 (this lane's block-q share)
  auto compute = [&](int U, const Unit& u) {
    const float2 dm0 = __half22float2(*reinterpret_cast<const __half2*>(&u.dd[0]));
    const float2 dm1 = __half22float2(*reinterpret_cast<const __half2*>(&u.dd[1]));
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      const int T = 2 * U + t;
      const uint32_t* bp = bbase + T * bstride;
      const uint4 bm0 = *reinterpret_cast<const uint4*>(bp), bm1 = *reinterpret_cast<const uint4*>(bp + 4);
      const uint4 b10 = *reinterpret_cast<const uint4*>(bp + 64), b11 = *reinterpret_cast<const uint4*>(bp + 68);
      const uint4 xe = *reinterpret_cast<const uint4*>(stab + T * kTileWords + 192 + 4 * q);
      const uint32_t bm[8] = {bm0.x, bm0.y, bm0.z, bm0.w, bm1.x, bm1.y, bm1.z, bm1.w};
      const uint32_t b1[8] = {b10.x, b10.y, b10.z, b10.w, b11.x, b11.y, b11.z, b11.w};
      int e0[4] = {0, 0, 0, 0}, e1[4] = {0, 0, 0, 0};
      uint32_t a[4][4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        a[j][0] = (u.w[t][0] >> (2 * j)) & 0x03030303u;  // row g, sub q
        a[j][1] = (u.w[t][2] >> (2 * j)) & 0x03030303u;  // row g8, sub q
        a[j][2] = (u.w[t][1] >> (2 * j)) & 0x03030303u;  // row g, sub 4+q
        a[j][3] = (u.w[t][3] >> (2 * j)) & 0x03030303u;  // row g8, sub 4+q
        mma_s8(e0, a[j][0], a[j][1], a[j][2], a[j][3], bm[2 * j], bm[2 * j + 1]);
        mma_s8(e1, a[j][0], a[j][1], a[j][2], a[j][3], b1[2 * j], b1[2 * j + 1]);
      }
      if (xe.w) {  // some block of the tile has a d2 (warp-uniform)
        const uint4 b20 = *reinterpret_cast<const uint4*>(bp + 128), b21 = *reinterpret_cast<const uint4*>(bp + 132);
        const uint32_t b2[8] = {b20.x, b20.y, b20.z, b20.w, b21.x, b21.y, b21.z, b21.w};
        int e2[4] = {0, 0, 0, 0};
#pragma unroll
        for (int j = 0; j < 4; ++j) mma_s8(e2, a[j][0], a[j][1], a[j][2], a[j][3], b2[2 * j], b2[2 * j + 1]);
#pragma unroll
        for (int i = 0; i < 4; ++i) e1[i] += 256 * e2[i];
      }
      int S[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) S[i] = e0[i] + 256 * e1[i];
      const float xd = __uint_as_float(xe.x);
      const int sa = int(xe.y), sb = int(xe.z);
      const uint32_t s0 = u.sc[t][0], s1 = u.sc[t][1];
      const int isc0 = int(s0 & 15u) * S[0] + int((s0 >> 8) & 15u) * S[1];
      const int imn0 = int((s0 >> 4) & 15u) * sa + int(s0 >> 12) * sb;
      const int isc1 = int(s1 & 15u) * S[2] + int((s1 >> 8) & 15u) * S[3];
      const int imn1 = int((s1 >> 4) & 15u) * sa + int(s1 >> 12) * sb;
      acc0 += xd * (dm0.x * float(isc0) - dm0.y * float(imn0));
      acc1 += xd * (dm1.x * float(isc1) - dm1.y * float(imn1));
    }
  };

  Unit ua, ub;
  if (warp0 < groups) {
    const Rows r = rows(warp0);
    load(r, 0, ua);
    load(r, 1, ub);
  }
  for (int64_t G = warp0; G < groups; G += nwarps) {
    const Rows here = rows(G);
    const bool more = G + nwarps < groups;
    for (int U = 0; U < units; U += 2) {
      const bool last = U + 2 >= units;
      const Rows at = last ? rows(G + nwarps) : here;  // the slots' next units: these rows' or the next group's first
      const int at_u = last ? 0 : U + 2;
      compute(U, ua);
      if (!last || more) load(at, at_u, ua);
      compute(U + 1, ub);
      if (!last || more) load(at, at_u + 1, ub);
    }
    float r0 = acc0, r1 = acc1;
    r0 += __shfl_xor_sync(0xffffffffu, r0, 1), r1 += __shfl_xor_sync(0xffffffffu, r1, 1);
    r0 += __shfl_xor_sync(0xffffffffu, r0, 2), r1 += __shfl_xor_sync(0xffffffffu, r1, 2);
    if (q == 0) y[16 * G + g] = r0, y[16 * G + g + 8] = r1;
    acc0 = acc1 = 0.f;
  }
}

// ---- host ----
static float h2f(uint16_t h) {
  __half x;
  memcpy(&x, &h, 2);
  return __half2float(x);
}
static uint16_t f2h(float f) {
  __half x = __float2half(f);
  uint16_t h;
  memcpy(&h, &x, 2);
  return h;
}

int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? atoll(argv[1]) : 128256, k = argc > 2 ? atoll(argv[2]) : 4096;
  const int reps = argc > 3 ? atoi(argv[3]) : 20;
  if (n % 16 || k % 512) {
    fprintf(stderr, "n %% 16 and k %% 512 must be 0\n");
    return 1;
  }
  const int64_t subs = k / 16, units = k / 256;
  const size_t wbytes = size_t(n) * k / 4 + size_t(n) * subs + size_t(n) * units * 4;
  std::mt19937 rng(1234);
  std::vector<uint8_t> w(wbytes);
  for (auto& b : w) b = uint8_t(rng());
  uint16_t* dd = reinterpret_cast<uint16_t*>(w.data() + size_t(n) * k / 4 + size_t(n) * subs);
  std::uniform_real_distribution<float> ud(0.0005f, 0.01f);
  for (int64_t i = 0; i < n * units * 2; ++i) dd[i] = f2h(ud(rng));
  // x8: int8 q with 0 at m, Q = big (mostly 128..300 in magnitude, a few up to 2e6)
  std::vector<uint8_t> x(x8_bytes(k));
  X8Facts* facts = reinterpret_cast<X8Facts*>(x.data() + k);
  for (int64_t b = 0; b < k / 32; ++b) {
    X8Facts f;
    f.d = ud(rng);
    f.m = int(rng() % 32);
    const int r = int(rng() % 100);
    const int mag = r < 90 ? 128 + int(rng() % 170) : r < 97 ? 300 + int(rng() % 40000) : 40000 + int(rng() % 2000000);
    f.big = (rng() & 1) ? mag : -mag;
    int sum = f.big;
    for (int e = 0; e < 32; ++e) {
      const int v = e == f.m ? 0 : int(rng() % 255) - 127;
      x[b * 32 + e] = uint8_t(int8_t(v));
      sum += v;
    }
    f.sum = sum;
    facts[b] = f;
  }
  // reference (double)
  std::vector<double> ref(n);
  const uint8_t* scb = w.data() + size_t(n) * k / 4;
  for (int64_t r = 0; r < n; ++r) {
    double acc = 0;
    for (int64_t b = 0; b < k / 32; ++b) {
      const X8Facts& f = facts[b];
      double blk = 0;
      for (int e = 0; e < 32; ++e) {
        const int64_t el = b * 32 + e, s = el / 16, ei = el % 16;
        const uint32_t word = reinterpret_cast<const uint32_t*>(w.data())[r * subs + s];
        const int qv = int((word >> (8 * (ei % 4) + 2 * (ei / 4))) & 3u);
        const uint8_t sc = scb[r * subs + s];
        const double d = h2f(dd[2 * (r * units + el / 256)]), dmin = h2f(dd[2 * (r * units + el / 256) + 1]);
        const double wv = d * (sc & 15) * qv - dmin * (sc >> 4);
        const double xv = e == f.m ? double(f.big) : double(int8_t(x[b * 32 + e]));
        blk += wv * xv;
      }
      acc += blk * f.d;
    }
    ref[r] = acc;
  }
  int dev_sms = 0;
  CK(cudaDeviceGetAttribute(&dev_sms, cudaDevAttrMultiProcessorCount, 0));
  // weight copies to rotate through (at least 256 MB in all, beyond L2)
  const int copies = int(std::max<size_t>(1, (size_t(256) << 20) / wbytes + 1));
  std::vector<uint8_t*> dw(copies);
  for (auto& p : dw) {
    CK(cudaMalloc(&p, wbytes));
    CK(cudaMemcpy(p, w.data(), wbytes, cudaMemcpyHostToDevice));
  }
  uint8_t* dx;
  uint32_t* dtab;
  float* dy;
  CK(cudaMalloc(&dx, x.size()));
  CK(cudaMemcpy(dx, x.data(), x.size(), cudaMemcpyHostToDevice));
  const int nt = int(k / 128);
  CK(cudaMalloc(&dtab, size_t(nt) * kTileWords * 4));
  CK(cudaMalloc(&dy, n * 4));
  build_table<<<64, 256>>>(dx, k, dtab);
  table_flags<<<8, 128>>>(k, dtab);
  constexpr int kW = 16;
  const size_t smem = size_t(nt) * kTileWords * 4 + 192 * 4;
  CK(cudaFuncSetAttribute(q2k_mma<kW>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  CK(cudaMemset(dy, 0xFF, n * 4));  // poison
  q2k_mma<kW><<<dev_sms, kW * 32, smem>>>(dw[0], dtab, dy, n, k);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  std::vector<float> hy(n);
  CK(cudaMemcpy(hy.data(), dy, n * 4, cudaMemcpyDeviceToHost));
  double maxerr = 0, maxref = 0;
  for (int64_t r = 0; r < n; ++r) {
    maxerr = std::max(maxerr, std::fabs(double(hy[r]) - ref[r]));
    maxref = std::max(maxref, std::fabs(ref[r]));
  }
  const bool ok = maxerr <= 1e-5 * maxref && std::isfinite(maxerr);
  // time: kernel (incl. table build, as a real launch would need) and copy bandwidth
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> tk, tt;
  for (int i = 0; i < reps + 3; ++i) {
    CK(cudaEventRecord(e0));
    q2k_mma<kW><<<dev_sms, kW * 32, smem>>>(dw[i % copies], dtab, dy, n, k);
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    if (i >= 3) tk.push_back(ms * 1000.f);
    CK(cudaEventRecord(e0));
    build_table<<<64, 256>>>(dx, k, dtab);
    table_flags<<<8, 128>>>(k, dtab);
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&ms, e0, e1));
    if (i >= 3) tt.push_back(ms * 1000.f);
  }
  std::sort(tk.begin(), tk.end());
  std::sort(tt.begin(), tt.end());
  const size_t cb = size_t(1) << 30;
  uint8_t *c0, *c1;
  CK(cudaMalloc(&c0, cb));
  CK(cudaMalloc(&c1, cb));
  CK(cudaMemset(c0, 1, cb));
  std::vector<float> tc;
  for (int i = 0; i < 7; ++i) {
    CK(cudaEventRecord(e0));
    CK(cudaMemcpyAsync(c1, c0, cb, cudaMemcpyDeviceToDevice));
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    tc.push_back(ms);
  }
  std::sort(tc.begin(), tc.end());
  const double copy_gbs = 2.0 * cb / (tc[3] * 1e-3) / 1e9;
  const double file_bytes = double(n) * k * 84.0 / 256.0;
  const double us = tk[tk.size() / 2];
  printf("q2k_mma n=%lld k=%lld: %s (max err %.3g of %.3g)  kernel %.2f us (min %.2f)  table %.2f us  %.0f GB/s = %.1f %% of copy (%.0f GB/s)\n",
         (long long)n, (long long)k, ok ? "PASS" : "FAIL", maxerr, maxref, us, tk[0], tt[tt.size() / 2],
         file_bytes / (us * 1e-6) / 1e9, 100.0 * file_bytes / (us * 1e-6) / 1e9 / copy_gbs, copy_gbs);
  return ok ? 0 : 2;
}
