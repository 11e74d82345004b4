// upfirdn2d: upsample, FIR-filter, downsample every channel of an NCHW tensor.
//
// Per axis (x = width, y = height), for input length n, upsampling factor up,
// pads pad0/pad1 (negative = crop), kernel length K and downsampling factor down:
//
//   u[m]   = x[m / up]  if m % up == 0 and 0 <= m < n * up, else 0    (zero insertion)
//   p[j]   = u[j - pad0]                                              (pad / crop)
//   c[t]   = sum_k p[t + K - 1 - k] * kernel[k]                       (true convolution, "valid")
//   out[o] = c[o * down]                                              (keep every down-th)
//
// so   out[o] = sum_k kernel[K - 1 - k] * u[o * down + k - pad0],
// with output length (n * up + pad0 + pad1 - K) / down + 1.
//
// The kernels below evaluate that sum directly and only visit the taps that
// land on a real (non-inserted, non-padding) sample.  The CUDA kernel and the
// general CPU path do it per output element (the first valid tap aligned to the
// upsampling grid, then stepped by up); the CPU path for up_x == 1 or
// down_x == 1 builds a whole output row one tap at a time instead.
//
// CPU kernel here; the CUDA kernel is in upfirdn2d_cuda.cu, used only when
// compiled with -DWITH_CUDA.  The Python binding is in fused_bias_act.cpp.

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>

#ifdef WITH_CUDA
// From upfirdn2d_cuda.cu.  input (N, C, H, W), kernel (KH, KW) and output are
// contiguous, on one CUDA device, of one dtype; output already has its final size.
void upfirdn2d_cuda(const at::Tensor& input, const at::Tensor& kernel, at::Tensor& output, int64_t up_x,
                    int64_t up_y, int64_t down_x, int64_t down_y, int64_t pad_x0, int64_t pad_y0);
#endif

namespace {

inline int64_t floor_mod(int64_t a, int64_t b) {
  const int64_t r = a % b;
  return r < 0 ? r + b : r;
}

// The taps k in [begin, end) step `up` for which u[m0 + k] is a real sample.
struct TapRange {
  int64_t begin;
  int64_t end;
};

inline TapRange valid_taps(int64_t m0, int64_t up, int64_t n_up, int64_t k_size) {
  // m0 + k must be a multiple of up, >= 0 and < n * up.
  int64_t begin = floor_mod(-m0, up);
  if (m0 + begin < 0) begin = -m0;  // -m0 is congruent to begin, so still on the grid
  const int64_t end = std::min(k_size, n_up - m0);
  return {begin, end};
}

// Output columns ox that tap kx of one kernel row reaches, and the input columns they read:
// ox = first, first + o_step, ..., up to last (inclusive); input column starts at ix_first, steps i_step.
// Only for up == 1 or down == 1, where the valid columns form one arithmetic progression.
struct ColumnRun {
  int64_t first, last, o_step, ix_first, i_step;
};

inline int64_t ceil_div_nonneg(int64_t a, int64_t b) { return (a + b - 1) / b; }  // a >= 0, b > 0

inline ColumnRun column_run(int64_t kx, int64_t pad0, int64_t up, int64_t down, int64_t in_w, int64_t out_w) {
  // upsampled position m = ox * down + c must satisfy 0 <= m < in_w * up and m % up == 0.
  const int64_t c = kx - pad0;
  const int64_t m_last = in_w * up - 1;
  ColumnRun run{0, -1, 1, 0, 1};
  if (up == 1) {
    const int64_t first = c >= 0 ? 0 : ceil_div_nonneg(-c, down);
    if (m_last - c < 0) return run;
    const int64_t last = std::min(out_w - 1, (m_last - c) / down);
    run = {first, last, 1, first * down + c, down};
  } else {  // down == 1: m = ox + c
    int64_t first = std::max<int64_t>(0, -c);
    first += floor_mod(-c - first, up);
    const int64_t last = std::min(out_w - 1, m_last - c);
    run = {first, last, up, (first + c) / up, 1};
  }
  return run;
}

template <typename scalar_t>
void upfirdn2d_cpu_kernel(const scalar_t* x, const scalar_t* kernel, scalar_t* out, int64_t planes, int64_t in_h,
                          int64_t in_w, int64_t out_h, int64_t out_w, int64_t k_h, int64_t k_w, int64_t up_x,
                          int64_t up_y, int64_t down_x, int64_t down_y, int64_t pad_x0, int64_t pad_y0) {
  const int64_t rows = planes * out_h;
  const int64_t work_per_row = std::max<int64_t>(1, out_w * k_h * k_w);
  const int64_t grain = std::max<int64_t>(1, at::internal::GRAIN_SIZE / work_per_row);
  // With up_x == 1 or down_x == 1 (all GFPGAN uses), a whole output row is built
  // tap by tap as strided multiply-adds, which the compiler can vectorise.
  const bool row_wise = up_x == 1 || down_x == 1;
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t plane = row / out_h;
      const int64_t oy = row % out_h;
      const scalar_t* xp = x + plane * in_h * in_w;
      scalar_t* orow = out + row * out_w;
      const int64_t my0 = oy * down_y - pad_y0;
      const TapRange ty = valid_taps(my0, up_y, in_h * up_y, k_h);

      if (row_wise) {
        std::fill(orow, orow + out_w, scalar_t(0));
        for (int64_t ky = ty.begin; ky < ty.end; ky += up_y) {
          const scalar_t* xr = xp + ((my0 + ky) / up_y) * in_w;
          const scalar_t* kr = kernel + (k_h - 1 - ky) * k_w + (k_w - 1);  // flipped kernel row
          for (int64_t kx = 0; kx < k_w; ++kx) {
            const scalar_t w = kr[-kx];
            const ColumnRun r = column_run(kx, pad_x0, up_x, down_x, in_w, out_w);
            if (r.o_step == 1 && r.i_step == 1) {
              const int64_t shift = r.ix_first - r.first;
              for (int64_t ox = r.first; ox <= r.last; ++ox) orow[ox] += w * xr[ox + shift];
            } else {
              for (int64_t ox = r.first, ix = r.ix_first; ox <= r.last; ox += r.o_step, ix += r.i_step) {
                orow[ox] += w * xr[ix];
              }
            }
          }
        }
        continue;
      }

      // General case: each output element on its own.
      for (int64_t ox = 0; ox < out_w; ++ox) {
        const int64_t mx0 = ox * down_x - pad_x0;
        const TapRange tx = valid_taps(mx0, up_x, in_w * up_x, k_w);
        scalar_t acc = 0;
        for (int64_t ky = ty.begin; ky < ty.end; ky += up_y) {
          const scalar_t* xr = xp + ((my0 + ky) / up_y) * in_w;
          const scalar_t* kr = kernel + (k_h - 1 - ky) * k_w + (k_w - 1);  // flipped kernel row
          for (int64_t kx = tx.begin; kx < tx.end; kx += up_x) {
            acc += xr[(mx0 + kx) / up_x] * kr[-kx];
          }
        }
        orow[ox] = acc;
      }
    }
  });
}

}  // namespace

at::Tensor upfirdn2d(const at::Tensor& input, const at::Tensor& kernel, int64_t up_x, int64_t up_y,
                     int64_t down_x, int64_t down_y, int64_t pad_x0, int64_t pad_x1, int64_t pad_y0,
                     int64_t pad_y1) {
  constexpr const char* op = "upfirdn2d";
  TORCH_CHECK(input.dim() == 4, op, ": input must be 4-D (N, C, H, W), got ", input.dim(), "-D with shape ",
              input.sizes());
  TORCH_CHECK(kernel.dim() == 2, op, ": kernel must be 2-D (KH, KW), got ", kernel.dim(), "-D with shape ",
              kernel.sizes());
  TORCH_CHECK(input.is_cpu() || input.is_cuda(), op, ": input must be a CPU or CUDA tensor, got device ",
              input.device());
  TORCH_CHECK(kernel.device() == input.device(), op, ": kernel is on ", kernel.device(), " but input is on ",
              input.device());
  TORCH_CHECK(at::isFloatingType(input.scalar_type()), op, ": input must be a floating-point tensor, got ",
              input.scalar_type());
  TORCH_CHECK(kernel.scalar_type() == input.scalar_type(), op, ": kernel dtype ", kernel.scalar_type(),
              " differs from input dtype ", input.scalar_type());
  TORCH_CHECK(up_x >= 1 && up_y >= 1 && down_x >= 1 && down_y >= 1, op,
              ": up and down factors must be >= 1, got up=(", up_x, ", ", up_y, "), down=(", down_x, ", ",
              down_y, ")");
  TORCH_CHECK(kernel.size(0) >= 1 && kernel.size(1) >= 1, op, ": kernel must not be empty");

  const int64_t n = input.size(0), c = input.size(1), in_h = input.size(2), in_w = input.size(3);
  const int64_t k_h = kernel.size(0), k_w = kernel.size(1);
  const int64_t padded_h = in_h * up_y + pad_y0 + pad_y1;
  const int64_t padded_w = in_w * up_x + pad_x0 + pad_x1;
  TORCH_CHECK(padded_h >= k_h && padded_w >= k_w, op, ": the kernel (", k_h, "x", k_w,
              ") is larger than the upsampled and padded input (", padded_h, "x", padded_w,
              "); the output would be empty");
  const int64_t out_h = (padded_h - k_h) / down_y + 1;
  const int64_t out_w = (padded_w - k_w) / down_x + 1;

  const at::Tensor x = input.contiguous();
  const at::Tensor k = kernel.contiguous();
  at::Tensor out = at::empty({n, c, out_h, out_w}, x.options());
  if (out.numel() == 0) return out;
  if (x.numel() == 0) return out.zero_();

  if (x.is_cuda()) {
#ifdef WITH_CUDA
    upfirdn2d_cuda(x, k, out, up_x, up_y, down_x, down_y, pad_x0, pad_y0);
    return out;
#else
    TORCH_CHECK(false, op, ": got a CUDA tensor, but this extension was built without its CUDA kernels");
#endif
  }
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kDouble, op,
              ": the CPU kernel supports float32 and float64, got ", x.scalar_type());
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "upfirdn2d_cpu", [&] {
    upfirdn2d_cpu_kernel<scalar_t>(x.data_ptr<scalar_t>(), k.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(),
                                   n * c, in_h, in_w, out_h, out_w, k_h, k_w, up_x, up_y, down_x, down_y,
                                   pad_x0, pad_y0);
  });
  return out;
}
