// Sample timers: a steady clock on the CPU, device events on a GPU.
#pragma once
#include <memory>
#include <vector>

namespace pgp {

class SampleTimer {
 public:
  virtual ~SampleTimer() = default;
  virtual void start(int sample) = 0;
  virtual void stop(int sample) = 0;
  // Blocks until every sample is complete and returns their durations in seconds.
  virtual std::vector<double> seconds() = 0;
};

std::unique_ptr<SampleTimer> make_cpu_timer(int samples);
// Event-pair timer on `stream` (a cudaStream_t) of CUDA device `device`.
// Throws when the extension was built without CUDA.
std::unique_ptr<SampleTimer> make_cuda_timer(int samples, void* stream, int device);

}  // namespace pgp
