// Linked only into CPU-only builds of the extension.
#include "core/errors.h"
#include "core/timer.h"

namespace pgp {

std::unique_ptr<SampleTimer> make_cuda_timer(int, void*, int) {
  throw Error("pygpuperf was built without CUDA; rebuild with nvcc and a CUDA build of torch");
}

}  // namespace pgp
