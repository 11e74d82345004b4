// fused_bias_act: StyleGAN2's "FusedLeakyReLU" as a compiled operation.
//
//   forward:   y = scale * leaky_relu(x + bias, negative_slope)     (bias along dim 1)
//   backward:  dx = dy * scale * (y > 0 ? 1 : negative_slope)
//
// The backward reads the forward OUTPUT y, not the input: because scale > 0,
// y > 0 exactly when x + bias > 0, so the output is all the kernel needs to know
// which side of the kink each element was on.  The same kernel also serves the
// double backward (its result is linear in dy).
//
// CPU kernels are here; CUDA kernels are in fused_bias_act_cuda.cu and are used
// only when this file is compiled with -DWITH_CUDA.  This file also holds the
// Python module definition (pybind11) for the whole extension, including
// upfirdn2d from upfirdn2d.cpp.

#include <torch/extension.h>

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <optional>

// From upfirdn2d.cpp.
at::Tensor upfirdn2d(const at::Tensor& input, const at::Tensor& kernel, int64_t up_x, int64_t up_y,
                     int64_t down_x, int64_t down_y, int64_t pad_x0, int64_t pad_x1, int64_t pad_y0,
                     int64_t pad_y1);

#ifdef WITH_CUDA
// From fused_bias_act_cuda.cu.  Inputs are contiguous and on one CUDA device;
// bias may be undefined (no bias).
void fused_bias_act_forward_cuda(const at::Tensor& input, const at::Tensor& bias, at::Tensor& output,
                                 int64_t channels, int64_t inner, double negative_slope, double scale);
void fused_bias_act_backward_cuda(const at::Tensor& grad_output, const at::Tensor& output,
                                  at::Tensor& grad_input, double negative_slope, double scale);
#endif

namespace {

// Elements after dim 1 (1 for a 2-D input).
int64_t inner_size(const at::Tensor& t) {
  int64_t inner = 1;
  for (int64_t d = 2; d < t.dim(); ++d) inner *= t.size(d);
  return inner;
}

void check_floating_tensor(const at::Tensor& t, const char* op, const char* name) {
  TORCH_CHECK(t.is_cpu() || t.is_cuda(), op, ": ", name, " must be a CPU or CUDA tensor, got device ",
              t.device());
  TORCH_CHECK(at::isFloatingType(t.scalar_type()), op, ": ", name,
              " must be a floating-point tensor, got dtype ", t.scalar_type());
  TORCH_CHECK(t.dim() >= 2, op, ": ", name, " must have at least 2 dimensions (N, C, ...), got ",
              t.dim(), "-D with shape ", t.sizes());
}

void check_cpu_dtype(const at::Tensor& t, const char* op) {
  TORCH_CHECK(t.scalar_type() == at::kFloat || t.scalar_type() == at::kDouble, op,
              ": the CPU kernel supports float32 and float64, got ", t.scalar_type());
}

template <typename scalar_t>
void forward_cpu_kernel(const scalar_t* x, const scalar_t* bias, scalar_t* y, int64_t rows, int64_t channels,
                        int64_t inner, scalar_t slope, scalar_t scale) {
  // One "row" is the inner block of one (n, c) pair, so the bias is looked up once per row.
  const int64_t grain = std::max<int64_t>(1, at::internal::GRAIN_SIZE / std::max<int64_t>(inner, 1));
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const scalar_t b = bias != nullptr ? bias[r % channels] : scalar_t(0);
      const scalar_t* xr = x + r * inner;
      scalar_t* yr = y + r * inner;
      for (int64_t i = 0; i < inner; ++i) {
        const scalar_t v = xr[i] + b;
        yr[i] = (v > scalar_t(0) ? v : v * slope) * scale;
      }
    }
  });
}

template <typename scalar_t>
void backward_cpu_kernel(const scalar_t* grad_out, const scalar_t* out, scalar_t* grad_in, int64_t numel,
                         scalar_t slope, scalar_t scale) {
  at::parallel_for(0, numel, at::internal::GRAIN_SIZE, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      // (dy * scale) first, then the slope: the same rounding as autograd of the plain version.
      const scalar_t g = grad_out[i] * scale;
      grad_in[i] = out[i] > scalar_t(0) ? g : g * slope;
    }
  });
}

}  // namespace

// y = scale * leaky_relu(input + bias, negative_slope), bias (C,) added along dim 1; bias may be None.
at::Tensor fused_bias_act(const at::Tensor& input, const std::optional<at::Tensor>& bias_opt,
                          double negative_slope, double scale) {
  constexpr const char* op = "fused_bias_act";
  check_floating_tensor(input, op, "input");
  const at::Tensor x = input.contiguous();
  at::Tensor b;  // undefined = no bias
  if (bias_opt.has_value() && bias_opt->defined()) {
    const at::Tensor& bias = *bias_opt;
    TORCH_CHECK(bias.dim() == 1 && bias.size(0) == input.size(1), op,
                ": bias must have shape (C,) = (", input.size(1), ",) to match input dim 1, got shape ",
                bias.sizes());
    TORCH_CHECK(bias.device() == input.device(), op, ": bias is on ", bias.device(), " but input is on ",
                input.device());
    TORCH_CHECK(bias.scalar_type() == input.scalar_type(), op, ": bias dtype ", bias.scalar_type(),
                " differs from input dtype ", input.scalar_type());
    b = bias.contiguous();
  }
  at::Tensor y = at::empty_like(x);
  if (x.numel() == 0) return y;
  const int64_t channels = x.size(1);
  const int64_t inner = inner_size(x);

  if (x.is_cuda()) {
#ifdef WITH_CUDA
    fused_bias_act_forward_cuda(x, b, y, channels, inner, negative_slope, scale);
    return y;
#else
    TORCH_CHECK(false, op, ": got a CUDA tensor, but this extension was built without its CUDA kernels");
#endif
  }
  check_cpu_dtype(x, op);
  const int64_t rows = x.numel() / inner;
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "fused_bias_act_cpu", [&] {
    forward_cpu_kernel<scalar_t>(x.data_ptr<scalar_t>(), b.defined() ? b.data_ptr<scalar_t>() : nullptr,
                                 y.data_ptr<scalar_t>(), rows, channels, inner,
                                 static_cast<scalar_t>(negative_slope), static_cast<scalar_t>(scale));
  });
  return y;
}

// grad_input = grad_output * scale * (output > 0 ? 1 : negative_slope), output = the forward's result.
at::Tensor fused_bias_act_backward(const at::Tensor& grad_output, const at::Tensor& output,
                                   double negative_slope, double scale) {
  constexpr const char* op = "fused_bias_act_backward";
  check_floating_tensor(grad_output, op, "grad_output");
  check_floating_tensor(output, op, "output");
  TORCH_CHECK(grad_output.sizes() == output.sizes(), op, ": grad_output shape ", grad_output.sizes(),
              " differs from output shape ", output.sizes());
  TORCH_CHECK(grad_output.device() == output.device(), op, ": grad_output is on ", grad_output.device(),
              " but output is on ", output.device());
  TORCH_CHECK(grad_output.scalar_type() == output.scalar_type(), op, ": grad_output dtype ",
              grad_output.scalar_type(), " differs from output dtype ", output.scalar_type());
  const at::Tensor g = grad_output.contiguous();
  const at::Tensor y = output.contiguous();
  at::Tensor grad_input = at::empty_like(g);
  if (g.numel() == 0) return grad_input;

  if (g.is_cuda()) {
#ifdef WITH_CUDA
    fused_bias_act_backward_cuda(g, y, grad_input, negative_slope, scale);
    return grad_input;
#else
    TORCH_CHECK(false, op, ": got a CUDA tensor, but this extension was built without its CUDA kernels");
#endif
  }
  check_cpu_dtype(g, op);
  AT_DISPATCH_FLOATING_TYPES(g.scalar_type(), "fused_bias_act_backward_cpu", [&] {
    backward_cpu_kernel<scalar_t>(g.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), grad_input.data_ptr<scalar_t>(),
                                  g.numel(), static_cast<scalar_t>(negative_slope), static_cast<scalar_t>(scale));
  });
  return grad_input;
}

bool built_with_cuda() {
#ifdef WITH_CUDA
  return true;
#else
  return false;
#endif
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "GFPGAN / StyleGAN2 custom ops (fused bias + leaky ReLU, upfirdn2d) for tritonbook";
  m.def("fused_bias_act", &fused_bias_act,
        "scale * leaky_relu(input + bias, negative_slope), bias (C,) along dim 1 or None",
        py::arg("input"), py::arg("bias"), py::arg("negative_slope"), py::arg("scale"));
  m.def("fused_bias_act_backward", &fused_bias_act_backward,
        "grad_output * scale * (output > 0 ? 1 : negative_slope), output = the forward's result",
        py::arg("grad_output"), py::arg("output"), py::arg("negative_slope"), py::arg("scale"));
  m.def("upfirdn2d", &upfirdn2d,
        "upsample (zero insertion), pad/crop, true 2-D convolution with kernel, downsample; NCHW",
        py::arg("input"), py::arg("kernel"), py::arg("up_x"), py::arg("up_y"), py::arg("down_x"),
        py::arg("down_y"), py::arg("pad_x0"), py::arg("pad_x1"), py::arg("pad_y0"), py::arg("pad_y1"));
  m.def("built_with_cuda", &built_with_cuda, "whether the CUDA kernels were compiled in");
}
