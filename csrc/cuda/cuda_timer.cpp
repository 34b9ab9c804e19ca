#include <cuda_runtime.h>

#include "core/timer.h"
#include "cuda/cuda_check.h"

namespace pgp {
namespace {

class CudaEventTimer final : public SampleTimer {
 public:
  CudaEventTimer(int samples, cudaStream_t stream) : stream_(stream), events_(2 * samples, nullptr) {
    for (auto& e : events_) PGP_CUDA_CHECK(cudaEventCreate(&e));
  }
  ~CudaEventTimer() override {
    for (auto e : events_)
      if (e) cudaEventDestroy(e);
  }
  void start(int i) override { PGP_CUDA_CHECK(cudaEventRecord(events_[2 * i], stream_)); }
  void stop(int i) override { PGP_CUDA_CHECK(cudaEventRecord(events_[2 * i + 1], stream_)); }
  std::vector<double> seconds() override {
    std::vector<double> out(events_.size() / 2);
    PGP_CUDA_CHECK(cudaEventSynchronize(events_.back()));
    for (size_t i = 0; i < out.size(); ++i) {
      float ms = 0;
      PGP_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[2 * i], events_[2 * i + 1]));
      out[i] = ms * 1e-3;
    }
    return out;
  }

 private:
  cudaStream_t stream_;
  std::vector<cudaEvent_t> events_;
};

}  // namespace

std::unique_ptr<SampleTimer> make_cuda_timer(int samples, void* stream, int device) {
  PGP_CUDA_CHECK(cudaSetDevice(device));
  return std::make_unique<CudaEventTimer>(samples, static_cast<cudaStream_t>(stream));
}

}  // namespace pgp
