// Choices of the CUDA backend that are not the model's: filled by whoever makes the backend
// (the session from its options, tests directly). Plain data, no CUDA types, so that code built
// without CUDA can carry it. The defaults are the paths measured fastest (docs/benchmarks.md);
// the library reads no environment switches for them.
#pragma once

#include <string>

struct ncclComm;  // (nccl.h's communicator; only the CUDA backend's files see its definition)
namespace lamina::kernels {
struct PeerAllReduce;  // kernels/ops/peer_all_reduce.h
}

namespace lamina {

struct CudaOptions {
  // Prompt attention kernel (kernels::prefill_attention_name), for prompts and the batching
  // engine's prompt chunks: "v4_overlap" (default; Hopper, else it runs as v2_pipelined),
  // "v3_wgmma", "v2_pipelined" or "v1_mma" (the chunks then go to the decode splits).
  std::string prefill_attention = "v4_overlap";
  // The batching engine's decode-row attention over the paged cache: "mma" (default; tensor cores
  // where the heads allow, else the split kernels) or "split" (kernels::decode_attention_name).
  std::string decode_attention = "mma";
  // Decode attention at short context: RoPE and attention in one kernel per head (true) or the
  // split-by-length kernels at every length (false).
  bool single_pass_attention = true;
  // Time every replayed decode step (GPU time against the host's) and print it when the backend
  // goes (`lamina bench --graph-timing`).
  bool graph_timing = false;
  // Record repeated decode passes as CUDA graphs and replay them (false: every pass eager).
  bool graphs = true;
  // The batching engine's decode steps started before the host has their tokens (the recorded
  // step for every row's next position, its tokens the device's argmax; Backend::argmax_rows);
  // false: each step waits for the host (--no-run-ahead, to measure it).
  bool run_ahead = true;
  // A prompt pass's step plan launched a layer at a time while the host records the rest (false:
  // the whole plan at the pass's end; --whole-prompt-plan, to measure it).
  bool prompt_plan_parts = true;
  // The batching engine's prompt chunks (16 rows and more of one sequence) through the tensor-core
  // prefill kernel over their blocks (false: every row through the flash-decoding splits;
  // --no-paged-prefill, to measure it).
  bool paged_prefill = true;
  // Many rows of a gate/up pair and its GLU as one gated GEMM, the GLU in its epilogue writing the
  // down projection's 16-bit input (false: two GEMMs, the GLU kernel and a conversion;
  // --no-gated-gemm, to measure it).
  bool gated_gemm = true;
  // Matmuls of up to this many rows run as GEMVs (int8 activation blocks, the fused norms and
  // epilogues), more as GEMMs; 1 to kernels::kGemvMaxBatch (--gemv-max-rows). The batching
  // engine's steps of 3 to 8 rows are faster as GEMMs: Llama-3-8B q4_0 at 8 users 1,111 gen t/s
  // against 619 with 8-row GEMVs, at 4 users 597 against 495 (docs/benchmarks.md,
  // thirty-first session).
  int gemv_max_rows = 2;
  // A mixture of experts' pass of several rows runs its experts' GEMVs on the device (no read
  // back, recordable as a graph) while its (token, pick) pairs average at most this many an
  // expert; more rows (a prompt) go to the grouped GEMM on the device where the experts have one
  // (Hopper, q3_wgmma_rs's types: moe_sort, gemm_experts), else to the host's grouping and a GEMM
  // an expert (--moe-pairs-per-expert; 0: GEMVs for one-row passes only; -1, the default: 2 with
  // the grouped GEMM, else min(16, max(1, n_expert / 8)): backend/moe_policy.h).
  int moe_pairs_per_expert = -1;
  // The grouped GEMM's launch shape for the experts' down matrix (kernels/gemm/gemm_experts.h:
  // 128 or 256 weight rows a block, or two 128-row blocks an SM; --moe-down-launch). 256 rows
  // read each tile's activations half as often; kbench experts (q4_0, 64-2,048 tokens) had it the
  // fastest on Qwen3-30B-A3B's and Mixtral-8x7B's down matrices, by 11-16 % (docs/benchmarks.md,
  // sixty-second session). The gate/up pair's gated launch has one shape.
  enum class MoeDownLaunch { Rows128, Rows256, TwoBlocks } moe_down_launch = MoeDownLaunch::Rows256;
  // One sequence's sliding-window layers (Gemma 3's local layers) backed by a ring of chunks that
  // holds their window, at the whole cache's addresses (backend/cuda/cuda_kv_memory.h); false:
  // every row of every layer backed (--no-window-ring, to compare).
  bool window_ring = true;

  // The fused decode paths; tests turn them off to compare with the kernels they replace: the
  // greedy id from the logits GEMV (else the sampling kernel) and the one-row lookup reading the
  // staged inputs itself (else an upload kernel first).
  bool fused_argmax = true;
  bool staged_lookup = true;

  // Tensor parallelism (issue #35): this rank's NCCL communicator (backend/cuda/nccl_group.h),
  // through which the backend all-reduces on the GPUs; without one it all-reduces through the
  // model's Communicator in host memory, and graphs must be off.
  ncclComm* nccl = nullptr;
  // The one-shot peer all-reduce for vectors that fit its slots (decode rows), where the group
  // has it and all_reduce is not Nccl.
  const kernels::PeerAllReduce* peer = nullptr;
  // How the all-reduces run (--tp-all-reduce):
  //   Fused: the peer kernel, which for a decode row also adds the residual and either leaves the
  //          next norm pending for the GEMVs after it (int8 activations, rows up to kX8SsMaxK
  //          wide) or computes it (wider rows, f16 weights; its blocks meet at a barrier of the
  //          grid). Against Peer: Llama-3-8B tg128 on 2 H200 1.49x, Llama-2-70B 1.43x
  //          (docs/benchmarks.md, thirtieth session);
  //   Peer: the peer kernel, the add and the norm in a kernel of their own;
  //   Nccl: NCCL for every all-reduce.
  enum class AllReduce { Fused, Peer, Nccl } all_reduce = AllReduce::Fused;
};

}  // namespace lamina
