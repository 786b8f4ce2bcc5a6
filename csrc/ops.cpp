// The op schemas, in one place. Backends register their kernels in their own
// folders (cpu/, cuda/), autograd in autograd/; fake (meta) kernels live in Python
// (python/convt2d/_ops.py) through torch.library.
#include <Python.h>
#include <torch/library.h>

TORCH_LIBRARY(convt2d, m) {
  m.def(
      "forward(Tensor input, Tensor weight, Tensor? bias, int[2] stride, int[2] padding, "
      "int[2] output_padding, int groups, int[2] dilation) -> Tensor");
  // Gradients of forward w.r.t. (input, weight, bias). A gradient whose
  // output_mask entry is false is not computed and comes back as an empty
  // tensor of shape [0].
  m.def(
      "backward(Tensor grad_output, Tensor input, Tensor weight, int[2] stride, "
      "int[2] padding, int[2] output_padding, int groups, int[2] dilation, "
      "bool[3] output_mask) -> (Tensor, Tensor, Tensor)");
}

// Importing convt2d._C loads this library, which runs the registrations above.
static struct PyModuleDef convt2d_module = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};
PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&convt2d_module); }
