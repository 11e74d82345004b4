// Chapter 1's fused leaky ReLU as a PyTorch operator: tritonbook::fused_leaky_relu.
//
// TORCH_LIBRARY registers it with PyTorch's dispatcher when the library is loaded,
// so TorchScript can record a call to it by name and any process running libtorch
// (Python or C++, the container's libtorch backend included) can run it once the
// library is loaded there. Built against libtorch alone, with no Python: a library
// that a process without libpython, such as tritonserver, can preload.
// tritonbook.cpp_ops.build_op_library() compiles it; chapter 5 serves a model that
// calls it.

#include <ATen/ATen.h>
#include <torch/library.h>

#include <vector>

namespace {

// Add one bias per channel (dimension 1), apply a leaky ReLU, multiply by a gain:
// what StyleGAN2's fused_bias_act kernel computes, here with ATen's own kernels.
at::Tensor fused_leaky_relu(const at::Tensor& x, const at::Tensor& bias,
                            double negative_slope, double scale) {
  TORCH_CHECK(x.dim() >= 2, "fused_leaky_relu: x needs a channel dimension (dim 1), got ",
              x.dim(), " dimension(s)");
  TORCH_CHECK(bias.dim() == 1 && bias.size(0) == x.size(1),
              "fused_leaky_relu: bias must hold one value per channel (", x.size(1),
              "), got shape ", bias.sizes());
  std::vector<int64_t> shape(x.dim(), 1);
  shape[1] = bias.size(0);
  return at::leaky_relu(x + bias.view(shape), negative_slope) * scale;
}

}  // namespace

TORCH_LIBRARY(tritonbook, m) {
  m.def(
      "fused_leaky_relu(Tensor x, Tensor bias, float negative_slope=0.2, "
      "float scale=1.4142135623730951) -> Tensor");
}

// One kernel for every device and for autograd: it only calls ATen operators, which
// have CPU and CUDA kernels and gradients of their own.
TORCH_LIBRARY_IMPL(tritonbook, CompositeImplicitAutograd, m) {
  m.impl("fused_leaky_relu", &fused_leaky_relu);
}
