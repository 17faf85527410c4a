// Collectives of a tensor-parallel rank (issue #35): the all-reduce node of the step plan. A
// vector that fits the peer all-reduce's slots (CudaOptions::peer: decode rows) goes through that
// one kernel over NVLink. With an NCCL communicator (CudaOptions::nccl) the sum runs on the GPUs, on this backend's stream, so
// a recorded decode graph holds it like any kernel. Without one the ranks sum in host memory
// through the Communicator the model passes (ranks as threads; several ranks may share one GPU,
// which is how one-GPU machines test the split): the stream is drained, the tensor read, summed
// and written back, so such passes cannot be recorded as graphs (the ranks run with graphs off).
#include "backend/cuda/cuda_backend.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_op.h"
#include "backend/cuda/nccl_group.h"
#include "kernels/common/q8_blocks.h"
#include "kernels/ops/peer_all_reduce.h"

#include <cuda_runtime.h>

#include <string>

namespace lamina {

void CudaBackend::all_reduce_sum(Tensor t, Communicator& comm) {
  check("all_reduce", comm.ranks() >= 1, "an empty group");
  plan_.all_reduce(t, comm);
}

void CudaBackend::exec_all_reduce(const plan::Node& n) {
  const size_t len = size_t(n.x.rows * n.x.cols);
  // (a ring all-reduce moves about 2 (N - 1) / N of the tensor each way per GPU)
  const double bytes = double(len) * 4.0 * 2.0;
  if (peer_ && int64_t(len) <= peer_->max_elems)  // a decode row's vector: one kernel over NVLink
    return run_op("all_reduce (peer)", bytes, 0, [&] { return kn::peer_all_reduce(*peer_, n.x.data, int64_t(len), stream_); });
  if (nccl_) {
    return run_op("all_reduce", bytes, 0, [&] {
      std::string why;
      return nccl_all_reduce_sum(nccl_, n.x.data, len, stream_, &why) ? kn::Status::success()
                                                                         : kn::Status::error("ncclAllReduce: " + why);
    });
  }
  check("all_reduce", capturing_ == 0, "a host-memory group cannot be recorded in a graph (run the ranks with graphs off)");
  host_reduce_.resize(len);
  cuda_check(cudaMemcpyAsync(host_reduce_.data(), n.x.data, len * sizeof(float), cudaMemcpyDeviceToHost, stream_),
             "all_reduce");
  cuda_check(cudaStreamSynchronize(stream_), "all_reduce");
  n.comm->all_reduce_sum(host_reduce_.data(), len);
  cuda_check(cudaMemcpyAsync(n.x.data, host_reduce_.data(), len * sizeof(float), cudaMemcpyHostToDevice, stream_),
             "all_reduce");
  cuda_check(cudaStreamSynchronize(stream_), "all_reduce");  // (host_reduce_ is reused by the next one)
}

// One decode row (fuse() chose it): x += the ranks' sum of y in one kernel over NVLink that also
// writes the int8 blocks of x * norm2 and their sums of squares, the norm pending for the GEMVs
// that take it; or, for a row too wide for that, computes out = rmsnorm(x) * norm2 (and its int8
// blocks where a GEMV reads them).
void CudaBackend::exec_all_reduce_add_norm(const plan::Node& n, Made& m) {
  const int64_t len = n.x.rows * n.x.cols;
  check("all_reduce+add+norm", peer_ && n.x.rows == 1 && len <= peer_->max_elems,
        "the fused all-reduce needs the peer all-reduce and one row");
  const float* w = static_cast<const float*>(n.norm2.data);
  if (!n.pending_norm) {
    m.x8 = x8_scratch(n, n.out);
    return run_op("all_reduce+add+norm (peer)", double(len) * 24.0, 0, [&] {
      return kn::peer_all_reduce_add_norm(*peer_, n.y.data, n.x.data, w, len, n.eps, n.out.data, m.x8, stream_);
    });
  }
  m.x8 = scratch_bytes(kn::x8_bytes(len));
  m.ss = static_cast<double*>(scratch_bytes(size_t(len / 32) * sizeof(double)));
  run_op("all_reduce+add, norm pending (peer)", double(len) * 17.0, 0, [&] {
    return kn::peer_all_reduce_add_x8(*peer_, n.y.data, n.x.data, w, len, m.x8, m.ss, stream_);
  });
}

}  // namespace lamina
