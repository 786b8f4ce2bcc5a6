// Minimal probe extension for the "TORCH_CHECK ends the process" defect.
// One source, several modules: the build defines PROBE_NS (module name = op namespace) and
//   PROBE_PYBIND     -> pybind11 module (torch/extension.h) that also registers the ops
//   (none)           -> bare PyInit module, exactly like csrc/ops.cpp (Python.h + TORCH_LIBRARY)
//   PROBE_WITH_CUDA  -> also CUDA kernels for the ops and a real .cu launch (CUDAExtension)
// Every op first works on its input, then throws, so a crash can't be blamed on a dead module.
#ifdef PROBE_PYBIND
#include <torch/extension.h>
#else
#include <Python.h>
#endif
#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <stdexcept>

#ifdef PROBE_WITH_CUDA
int probe_launch_fill(float* p, long long n, float v);  // ext_probe_kernel.cu; returns cudaError_t
#endif

#define PROBE_STR_(x) #x
#define PROBE_STR(x) PROBE_STR_(x)
#define PROBE_CAT_(a, b) a##b
#define PROBE_CAT(a, b) PROBE_CAT_(a, b)
// TORCH_LIBRARY pastes its namespace argument, so expand PROBE_NS one level up first.
#define PROBE_LIBRARY(ns, m) TORCH_LIBRARY(ns, m)
#define PROBE_LIBRARY_IMPL(ns, k, m) TORCH_LIBRARY_IMPL(ns, k, m)

namespace {

at::Tensor ok_op(const at::Tensor& x) {
#ifdef PROBE_WITH_CUDA
  if (x.is_cuda() && x.scalar_type() == at::kFloat) {
    auto y = at::empty_like(x);
    int e = probe_launch_fill(y.data_ptr<float>(), y.numel(), 1.0f);
    TORCH_CHECK(e == 0, "probe: kernel launch failed: ", e);
    return y;
  }
#endif
  return x.clone();
}

at::Tensor throw_check(const at::Tensor& x) {
  auto y = x + 1;  // real work first
  TORCH_CHECK(y.numel() < 0, "probe: TORCH_CHECK from " PROBE_STR(PROBE_NS));
  return y;
}

at::Tensor throw_value(const at::Tensor& x) {
  auto y = x + 1;
  TORCH_CHECK_VALUE(y.numel() < 0, "probe: TORCH_CHECK_VALUE from " PROBE_STR(PROBE_NS));
  return y;
}

at::Tensor throw_notimpl(const at::Tensor& x) {
  TORCH_CHECK_NOT_IMPLEMENTED(x.numel() < 0, "probe: TORCH_CHECK_NOT_IMPLEMENTED from "
                              PROBE_STR(PROBE_NS));
  return x;
}

// Same message building as csrc/glue.cpp (sizes, device, dtype, toString()).
at::Tensor throw_fmt(const at::Tensor& x) {
  TORCH_CHECK(x.size(0) == 12345, "probe: Given transposed=1, weight of size ", x.sizes(),
              ", expected input", x.sizes(), " on ", x.device(), " dtype ", x.scalar_type(),
              " type ", x.toString(), " to have ", 12345, " channels");
  return x;
}

at::Tensor throw_std(const at::Tensor& x) {
  if (x.numel() >= 0) throw std::runtime_error("probe: plain std::runtime_error");
  return x;
}

}  // namespace

PROBE_LIBRARY(PROBE_NS, m) {
  m.def("ok_op(Tensor x) -> Tensor");
  m.def("throw_check(Tensor x) -> Tensor");
  m.def("throw_value(Tensor x) -> Tensor");
  m.def("throw_notimpl(Tensor x) -> Tensor");
  m.def("throw_fmt(Tensor x) -> Tensor");
  m.def("throw_std(Tensor x) -> Tensor");
}

PROBE_LIBRARY_IMPL(PROBE_NS, CPU, m) {
  m.impl("ok_op", &ok_op);
  m.impl("throw_check", &throw_check);
  m.impl("throw_value", &throw_value);
  m.impl("throw_notimpl", &throw_notimpl);
  m.impl("throw_fmt", &throw_fmt);
  m.impl("throw_std", &throw_std);
}

#ifdef PROBE_WITH_CUDA
PROBE_LIBRARY_IMPL(PROBE_NS, CUDA, m) {
  m.impl("ok_op", &ok_op);
  m.impl("throw_check", &throw_check);
  m.impl("throw_value", &throw_value);
  m.impl("throw_notimpl", &throw_notimpl);
  m.impl("throw_fmt", &throw_fmt);
  m.impl("throw_std", &throw_std);
}
#endif

#ifdef PROBE_PYBIND
static void py_throw_check() { TORCH_CHECK(false, "probe: pybind TORCH_CHECK"); }
static void py_throw_value() { TORCH_CHECK_VALUE(false, "probe: pybind TORCH_CHECK_VALUE"); }
static void py_throw_std() { throw std::runtime_error("probe: pybind std::runtime_error"); }
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("py_throw_check", &py_throw_check);
  m.def("py_throw_value", &py_throw_value);
  m.def("py_throw_std", &py_throw_std);
}
#else
// Importing the module loads the library, which runs the registrations (as csrc/ops.cpp).
static struct PyModuleDef probe_module = {PyModuleDef_HEAD_INIT, PROBE_STR(PROBE_NS), nullptr, -1,
                                          nullptr};
PyMODINIT_FUNC PROBE_CAT(PyInit_, PROBE_NS)(void) { return PyModule_Create(&probe_module); }
#endif
