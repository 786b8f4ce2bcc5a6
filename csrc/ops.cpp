// The op schemas, in one place. Backends register their kernels in their own
// folders (cpu/, cuda/), autograd in autograd/; fake (meta) kernels live in Python
// (python/convt2d/_ops.py) through torch.library.
#include <Python.h>
#include <torch/library.h>

#include "common/algo.h"
#include "common/tuning.h"

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

// ---- the autotune cache, read from Python (convt2d.info(), convt2d.tuning_log()) ------
namespace {

// d[k] = v, taking v's reference; false on error (v == nullptr: its creation failed).
bool set_item(PyObject* d, const char* k, PyObject* v) {
  if (!v) return false;
  const int rc = PyDict_SetItemString(d, k, v);
  Py_DECREF(v);
  return rc == 0;
}

PyObject* tuning_info(PyObject*, PyObject*) {
  const convt2d::tuning::Stats s = convt2d::tuning::stats();
  PyObject* d = PyDict_New();
  if (!d) return nullptr;
  if (!set_item(d, "tunings", PyLong_FromLongLong(s.tunings)) ||
      !set_item(d, "cache_hits", PyLong_FromLongLong(s.cache_hits)) ||
      !set_item(d, "cache_misses", PyLong_FromLongLong(s.cache_misses)) ||
      !set_item(d, "candidate_failures", PyLong_FromLongLong(s.candidate_failures)) ||
      !set_item(d, "entries", PyLong_FromLongLong(s.entries))) {
    Py_DECREF(d);
    return nullptr;
  }
  return d;
}

// [{"key", "chosen", "candidates": [{"name", "ms" (None if skipped), "skipped"}]}]
PyObject* tuning_log(PyObject*, PyObject*) {
  const auto recs = convt2d::tuning::records();
  PyObject* out = PyList_New(0);
  if (!out) return nullptr;
  for (const auto& r : recs) {
    PyObject* d = PyDict_New();
    PyObject* cl = PyList_New(0);
    bool ok = d && cl && set_item(d, "key", PyUnicode_FromString(r.key.c_str())) &&
              set_item(d, "chosen", PyUnicode_FromString(r.chosen.c_str()));
    for (size_t i = 0; ok && i < r.candidates.size(); ++i) {
      const auto& c = r.candidates[i];
      PyObject* cd = PyDict_New();
      ok = cd && set_item(cd, "name", PyUnicode_FromString(c.name.c_str())) &&
           set_item(cd, "ms", c.ms >= 0 ? PyFloat_FromDouble(c.ms) : (Py_INCREF(Py_None), Py_None)) &&
           set_item(cd, "skipped", PyUnicode_FromString(c.skipped.c_str())) &&
           PyList_Append(cl, cd) == 0;
      Py_XDECREF(cd);
    }
    ok = ok && PyDict_SetItemString(d, "candidates", cl) == 0 && PyList_Append(out, d) == 0;
    Py_XDECREF(cl);
    Py_XDECREF(d);
    if (!ok) {
      Py_DECREF(out);
      return nullptr;
    }
  }
  return out;
}

PyObject* tuning_reset(PyObject*, PyObject*) {
  convt2d::tuning::reset();
  Py_RETURN_NONE;
}

// [(pass, algorithm)] of the process's latest call of each pass (convt2d.last_algorithms()).
PyObject* last_algorithms(PyObject*, PyObject*) {
  const auto runs = convt2d::last_algorithms();
  PyObject* out = PyList_New(0);
  if (!out) return nullptr;
  for (const auto& r : runs) {
    PyObject* t = Py_BuildValue("(ss)", r.first.c_str(), r.second.c_str());
    if (!t || PyList_Append(out, t) != 0) {
      Py_XDECREF(t);
      Py_DECREF(out);
      return nullptr;
    }
    Py_DECREF(t);
  }
  return out;
}

PyMethodDef methods[] = {
    {"_tuning_info", tuning_info, METH_NOARGS, "autotune counters (convt2d.info())"},
    {"_tuning_log", tuning_log, METH_NOARGS, "autotune records (convt2d.tuning_log())"},
    {"_tuning_reset", tuning_reset, METH_NOARGS, "forget every autotuned choice"},
    {"_last_algorithms", last_algorithms, METH_NOARGS, "convt2d.last_algorithms()"},
    {nullptr, nullptr, 0, nullptr}};

}  // namespace

// Importing convt2d._C loads this library, which runs the registrations above.
static struct PyModuleDef convt2d_module = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, methods};
PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&convt2d_module); }
