// CUDA kernel for upfirdn2d (see upfirdn2d.cpp for the maths, the checks and the output size).
//
// One thread per output element, evaluating
//   out[o_y, o_x] = sum_{k_y, k_x} kernel[KH-1-k_y, KW-1-k_x] * u[o_y*down_y + k_y - pad_y0, o_x*down_x + k_x - pad_x0]
// over the taps that land on real samples of the zero-inserted input u.
// float and double accumulate in their own type; half accumulates in float.

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include <cstdint>
#include <limits>

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ int64_t floor_mod(int64_t a, int64_t b) {
  const int64_t r = a % b;
  return r < 0 ? r + b : r;
}

__device__ __forceinline__ int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// First valid tap for the window starting at upsampled position m0 (aligned to the up grid, >= 0).
__device__ __forceinline__ int64_t first_tap(int64_t m0, int64_t up) {
  int64_t begin = floor_mod(-m0, up);
  if (m0 + begin < 0) begin = -m0;
  return begin;
}

template <typename scalar_t, typename acc_t>
__global__ void upfirdn2d_kernel(const scalar_t* __restrict__ x, const scalar_t* __restrict__ kernel,
                                 scalar_t* __restrict__ out, int64_t numel, int64_t in_h, int64_t in_w,
                                 int64_t out_h, int64_t out_w, int64_t k_h, int64_t k_w, int64_t up_x,
                                 int64_t up_y, int64_t down_x, int64_t down_y, int64_t pad_x0, int64_t pad_y0) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= numel) return;
  const int64_t ox = i % out_w;
  const int64_t oy = (i / out_w) % out_h;
  const int64_t plane = i / (out_w * out_h);
  const scalar_t* xp = x + plane * in_h * in_w;

  const int64_t my0 = oy * down_y - pad_y0;
  const int64_t mx0 = ox * down_x - pad_x0;
  const int64_t ky_begin = first_tap(my0, up_y);
  const int64_t kx_begin = first_tap(mx0, up_x);
  const int64_t ky_end = min64(k_h, in_h * up_y - my0);
  const int64_t kx_end = min64(k_w, in_w * up_x - mx0);

  acc_t acc = acc_t(0);
  for (int64_t ky = ky_begin; ky < ky_end; ky += up_y) {
    const scalar_t* xr = xp + ((my0 + ky) / up_y) * in_w;
    const scalar_t* kr = kernel + (k_h - 1 - ky) * k_w + (k_w - 1);  // flipped kernel row
    for (int64_t kx = kx_begin; kx < kx_end; kx += up_x) {
      acc += static_cast<acc_t>(xr[(mx0 + kx) / up_x]) * static_cast<acc_t>(kr[-kx]);
    }
  }
  out[i] = static_cast<scalar_t>(acc);
}

}  // namespace

void upfirdn2d_cuda(const at::Tensor& input, const at::Tensor& kernel, at::Tensor& output, int64_t up_x,
                    int64_t up_y, int64_t down_x, int64_t down_y, int64_t pad_x0, int64_t pad_y0) {
  const c10::cuda::CUDAGuard guard(input.device());
  const int64_t numel = output.numel();
  const int64_t blocks = (numel + kThreads - 1) / kThreads;
  TORCH_CHECK(blocks <= std::numeric_limits<int>::max(), "upfirdn2d: output too large (", numel,
              " elements) for one launch");
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND_HALF(input.scalar_type(), "upfirdn2d_cuda", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    upfirdn2d_kernel<scalar_t, acc_t><<<static_cast<unsigned int>(blocks), kThreads, 0, stream>>>(
        input.data_ptr<scalar_t>(), kernel.data_ptr<scalar_t>(), output.data_ptr<scalar_t>(), numel,
        input.size(2), input.size(3), output.size(2), output.size(3), kernel.size(0), kernel.size(1), up_x, up_y,
        down_x, down_y, pad_x0, pad_y0);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}
