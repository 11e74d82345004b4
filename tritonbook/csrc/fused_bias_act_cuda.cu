// CUDA kernels for fused_bias_act (see fused_bias_act.cpp for the maths and the checks).
//
// One thread per element.  float and double compute in their own type; half
// computes in float (at::opmath_type) and rounds once when storing.

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

unsigned int blocks_for(int64_t numel) {
  const int64_t blocks = (numel + kThreads - 1) / kThreads;
  TORCH_CHECK(blocks <= std::numeric_limits<int>::max(), "fused_bias_act: tensor too large (", numel,
              " elements) for one launch");
  return static_cast<unsigned int>(blocks);
}

template <typename scalar_t, typename acc_t>
__global__ void fused_bias_act_forward_kernel(const scalar_t* __restrict__ x, const scalar_t* __restrict__ bias,
                                              scalar_t* __restrict__ y, int64_t numel, int64_t channels,
                                              int64_t inner, acc_t slope, acc_t scale) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= numel) return;
  acc_t v = static_cast<acc_t>(x[i]);
  if (bias != nullptr) v += static_cast<acc_t>(bias[(i / inner) % channels]);
  v = v > acc_t(0) ? v : v * slope;
  y[i] = static_cast<scalar_t>(v * scale);
}

template <typename scalar_t, typename acc_t>
__global__ void fused_bias_act_backward_kernel(const scalar_t* __restrict__ grad_out,
                                               const scalar_t* __restrict__ out, scalar_t* __restrict__ grad_in,
                                               int64_t numel, acc_t slope, acc_t scale) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= numel) return;
  const acc_t g = static_cast<acc_t>(grad_out[i]) * scale;
  grad_in[i] = static_cast<scalar_t>(static_cast<acc_t>(out[i]) > acc_t(0) ? g : g * slope);
}

}  // namespace

void fused_bias_act_forward_cuda(const at::Tensor& input, const at::Tensor& bias, at::Tensor& output,
                                 int64_t channels, int64_t inner, double negative_slope, double scale) {
  const c10::cuda::CUDAGuard guard(input.device());
  const int64_t numel = input.numel();
  const unsigned int blocks = blocks_for(numel);
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND_HALF(input.scalar_type(), "fused_bias_act_forward_cuda", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    fused_bias_act_forward_kernel<scalar_t, acc_t><<<blocks, kThreads, 0, stream>>>(
        input.data_ptr<scalar_t>(), bias.defined() ? bias.data_ptr<scalar_t>() : nullptr,
        output.data_ptr<scalar_t>(), numel, channels, inner, static_cast<acc_t>(negative_slope),
        static_cast<acc_t>(scale));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

void fused_bias_act_backward_cuda(const at::Tensor& grad_output, const at::Tensor& output,
                                  at::Tensor& grad_input, double negative_slope, double scale) {
  const c10::cuda::CUDAGuard guard(grad_output.device());
  const int64_t numel = grad_output.numel();
  const unsigned int blocks = blocks_for(numel);
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND_HALF(grad_output.scalar_type(), "fused_bias_act_backward_cuda", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    fused_bias_act_backward_kernel<scalar_t, acc_t><<<blocks, kThreads, 0, stream>>>(
        grad_output.data_ptr<scalar_t>(), output.data_ptr<scalar_t>(), grad_input.data_ptr<scalar_t>(), numel,
        static_cast<acc_t>(negative_slope), static_cast<acc_t>(scale));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}
