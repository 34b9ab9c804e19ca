// CUDA runtime error checks that throw pgp::Error with the error name and call site.
// Usable from .cu and .cpp files alike; no torch headers.
#pragma once
#include <cuda_runtime.h>

#include <string>

#include "core/errors.h"

#define PGP_CUDA_CHECK(expr)                                                                  \
  do {                                                                                        \
    cudaError_t pgp_err_ = (expr);                                                            \
    if (pgp_err_ != cudaSuccess) {                                                            \
      cudaGetLastError(); /* clear it, or the next launch check reports this error again */   \
      ::pgp::throw_error(std::string(cudaGetErrorName(pgp_err_)) + " (" +                     \
                             cudaGetErrorString(pgp_err_) + ") in " + #expr, __FILE__, __LINE__); \
    }                                                                                         \
  } while (0)

// After a kernel launch: catches bad launch configurations and missing kernel images.
#define PGP_CUDA_CHECK_LAUNCH() PGP_CUDA_CHECK(cudaGetLastError())
