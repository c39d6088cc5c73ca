// The CUDA stream type, declared exactly as the CUDA runtime declares it (driver_types.h:
// `typedef struct CUstream_st* cudaStream_t`), so that kernel headers can name cudaStream_t without
// including a CUDA header: callers of the CPU twins, and the whole CPU-only build, never see one.
// Redeclaring a typedef name as the same type is legal C++, so this header and <cuda_runtime.h>
// may be included in either order.
// A type only: no state, nothing thread-bound, no collective calls.
#pragma once

struct CUstream_st;
using cudaStream_t = CUstream_st*;
