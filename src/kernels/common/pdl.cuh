// Programmatic dependent launch (PDL, compute capability 9.0+).
//
// A kernel launched with launch_pdl may be scheduled while the kernel before it in the stream
// (or CUDA graph) is still running, as soon as every block of that kernel has called
// pdl_launch_dependents (or exited). It must call pdl_wait before it reads anything an earlier
// kernel writes and before it writes anything. The decode step is a chain of short dependent
// kernels; this takes the launch and the ramp-up of each off the critical path.
//
// Where the kernels trigger (measured in tg128 on the llama2-7b presets: docs/benchmarks.md):
//   - the small ops (norm, rope, attention, sampling) at their start: they occupy few SMs, so
//     the matmul after them can be resident and waiting when they finish;
//   - the GEMVs when their last weights are in (triggering at their start placed the next
//     kernel's waiting blocks among the GEMV's own and cost 1-3 %; this way q4_0 / q8_0 / f16
//     decode gained 3 % / 3 % / 1 % over plain launches);
//   - an L2 prefetch of the GEMV weights before the wait gained nothing or lost up to 8 % (the
//     prefetched lines compete with the kernel before), so none is done; nor did an L2 prefetch
//     of the next matrix issued by the kernel before (its last pass, or the decode attention for
//     all of Wo; 0 to -3 %, reverted); nor, at tensor parallelism, a bulk L2 prefetch by the
//     GEMVs after the all-reduce, whose wait leaves HBM idle (Llama-3-8B TP 2: -1.5 to -3.2 %);
//   - loading a GEMV's first step of weights into registers before the wait gained 5 % (q4_0)
//     and 2 % (q8_0); copying a block's rows into shared memory before it lost 11 % (blocks that
//     hold ~200 KiB of shared memory start only once the kernel before has left the SM).
// Anything a kernel reads that no earlier kernel writes (weights) may be read before pdl_wait.
//
// The rule that keeps the chain ordered: every kernel launched with launch_pdl waits (some
// thread of it reaches pdl_wait) before it completes, so it cannot complete before the kernel
// it follows, and the order holds transitively.
#pragma once

#include <cuda_runtime.h>

#include <utility>

namespace lamina::kernels {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// For kernels with nothing to do before their inputs are ready: let the next kernel be
// scheduled, then wait for the previous one.
__device__ __forceinline__ void pdl_enter() {
  pdl_launch_dependents();
  pdl_wait();
}

// kernel<<<grid, block, smem, s>>>(args...), allowed to overlap the previous kernel when PDL is
// on. Check the launch with launch_status() as for <<<>>>.
template <class... Params, class... Args>
void launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, Args&&... args) {
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  (void)cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

}  // namespace lamina::kernels
