// One-shot all-reduce of a small f32 vector among the GPUs of one process over peer access
// (NVLink), for tensor-parallel decode (issue #35): a rank's vector after a row-parallel GEMV is
// 4096-8192 floats, where NCCL's ring costs more in latency than the bytes take to move.
//
// The protocol (low latency, as NCCL's LL): each element travels as one 8-byte word holding its
// value and the call's epoch, written with one store at system scope, so a receiver that reads the
// epoch it waits for has the value too. The sender needs no fence and no flag, and the receiver
// polls the words themselves in its own memory: one crossing of NVLink per call. (The flags it
// replaced, each block's range written, a system fence, then a flag published and awaited, took
// three: 6.2 against 3.0 µs a call for 4096 floats on 2 H200; docs/benchmarks.md.)
//
// Layout (all device memory, made by the group that owns the GPUs):
//   slots[p]: on GPU p, [2 parities][ranks][max_elems] words (epoch << 32 | float bits): what
//             each rank sent p (a rank's own part is read where it lies, never sent to itself)
//   epoch:    on this rank's GPU, [kPeerMaxBlocks] uint32: the last epoch each block ran
//   arrived, block_ss: on this rank's GPU, a uint32 and [kPeerMaxBlocks] doubles: the grid
//             barrier of peer_all_reduce_add_norm (its blocks' sums of squares)
// Every kernel of this family launches kPeerMaxBlocks blocks, whatever its n, so that the blocks'
// epochs move together (epoch e is call e for every block and element). Call e writes parity e & 1.
// A word is 0 until sent and again once its receiver has read it; the epochs skip 0 when they wrap
// (... 2^32 - 1, 2, 3 ...), so no call waits for a word that a call 2^32 before left behind.
// A receiver waits for each element's word to hold e, then sums the ranks' values in rank order
// 0 .. N-1 into x: every rank gets the same bits. A sender one call ahead writes the other parity,
// and cannot get two ahead: it cannot finish its next call before this rank sends that call's
// words, which this rank's kernel does only after its kernel of this call has completed.
// Plain C++ (no CUDA types), so that the backend's options can carry it.
#pragma once

#include "kernels/common/status.h"

#include <cstddef>
#include <cstdint>

typedef struct CUstream_st* cudaStream_t;

namespace lamina::kernels {

inline constexpr int kPeerMaxRanks = 8;
inline constexpr int kPeerMaxBlocks = 16;

// The bytes of one GPU's slots (zeroed before the first call) for `ranks` and vectors of up to max_elems.
inline size_t peer_slots_bytes(int ranks, int64_t max_elems) { return size_t(2 * ranks) * size_t(max_elems) * 8; }

struct PeerAllReduce {
  int ranks = 0, rank = 0;
  int64_t max_elems = 0;                 // elements per slot: the largest vector it takes
  uint64_t* slots[kPeerMaxRanks] = {};
  uint32_t* epoch = nullptr;
  uint32_t* arrived = nullptr;   // zeroed; counts the blocks of peer_all_reduce_add_norm's calls
  double* block_ss = nullptr;    // [kPeerMaxBlocks]
};

// The bytes of one rank's own buffer (epoch, arrived, block_ss) and its views into one.
inline constexpr size_t kPeerLocalBytes = kPeerMaxBlocks * 4 + 16 + kPeerMaxBlocks * 8;
inline void set_peer_local(PeerAllReduce& g, void* local) {
  g.epoch = static_cast<uint32_t*>(local);
  g.arrived = g.epoch + kPeerMaxBlocks;
  g.block_ss = reinterpret_cast<double*>(static_cast<char*>(local) + kPeerMaxBlocks * 4 + 16);
}

// x[0..n) = the sum over the ranks of their x[0..n) (every rank calls with the same n <= max_elems,
// in the same order). A rank that never arrives stops the kernel after ~10 s with a trap.
Status peer_all_reduce(const PeerAllReduce& g, float* x, int64_t n, cudaStream_t s);

// The all-reduce and the residual add of one row with the next norm left pending: x += the
// ranks' sum of part; x8 = the int8 blocks of x * gain (layout of kernels/common/q8_blocks.h) and
// ss[n / 32] = each 32-element block's sum of squares of x (f64): a GEMV's x8 and x8_ss for
// rmsnorm(x) * gain (GemvProblem). n % 32 == 0. kPeerMaxBlocks blocks; x has the bits of
// peer_all_reduce then add. Launched as a dependent (PDL).
Status peer_all_reduce_add_x8(const PeerAllReduce& g, const float* part, float* x, const float* gain, int64_t n,
                              void* x8, double* ss, cudaStream_t s);

// The same with the norm computed, for rows wider than a pending norm covers: x += the ranks' sum
// of part; h = rmsnorm(x) * w and, when given, h's int8 blocks (h8). kPeerMaxBlocks blocks, each
// with its slice of whole 32-element blocks: the exchange and the sum as above, the slice's sum of
// squares, a barrier of the grid (arrived, block_ss: the blocks must be resident together, as
// 16 blocks are), then the slice of h from the total (summed in block order: the same scale in
// every block). n % 32 == 0. Launched as a dependent (PDL).
Status peer_all_reduce_add_norm(const PeerAllReduce& g, const float* part, float* x, const float* w, int64_t n,
                                float eps, float* h, void* h8, cudaStream_t s);

}  // namespace lamina::kernels
