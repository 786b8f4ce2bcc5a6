// Algorithm names and the CONVT2D_ALGO override (common/algo.h).
#include "common/algo.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <stdexcept>

namespace convt2d {
namespace {

const char* const kAlgoNames[] = {  // in Algo's order
    // forward
    "narrow_output", "direct", "direct_tensorop", "direct_simt", "patch_gemm",
    "implicit_gemm_padded", "depthwise", "cublas_gemm", "gemm_col2im",
    // forward and grad_input
    "implicit_gemm", "implicit_gemm_mma", "implicit_gemm_wgmma", "implicit_gemm_wgmma_ws",
    "implicit_gemm_halo", "implicit_gemm_simt",
    // grad_input
    "direct", "implicit_gemm_padded", "depthwise", "depthwise_tiled", "cublas_gemm",
    // grad_weight
    "wgmma_nchw", "tensorop", "simt", "direct", "tensorop_padded", "depthwise", "depthwise_tiled",
    "cublas_gemm",
    // backward transform; CPU
    "tap_gather", "tap_gather_cublas", "strided", "avx2", "baseline"};

static_assert(std::size(kAlgoNames) == size_t(Algo::kCount), "a name per algorithm");

const char* const kPassNames[int(Pass::kCount)] = {"fwd", "dgrad", "wgrad", "bwd", "cpu"};

// The algorithms each pass may be forced to, [first, last].
struct Range {
  Algo first, last;
};
const Range kPassAlgos[int(Pass::kCount)] = {
    {Algo::kNarrowOutput, Algo::kImplicitGemmSimt},
    {Algo::kImplicitGemm, Algo::kDgradCublasGemm},
    {Algo::kWgradWgmmaNchw, Algo::kWgradCublasGemm},
    {Algo::kTapGather, Algo::kStrided},
    {Algo::kCpuAvx2, Algo::kCpuBaseline}};

[[noreturn]] void bad(const std::string& what, const std::string& item, const std::string& valid) {
  throw std::runtime_error("convt2d: CONVT2D_ALGO: unknown " + what + " '" + item +
                              "'; valid: " + valid);
}

// value index in `names` (count n), or throws naming the option.
int pick(const std::string& opt, const std::string& v, const char* const* names, int n) {
  std::string valid;
  for (int i = 0; i < n; ++i) {
    if (v == names[i]) return i;
    valid += (i ? "|" : "") + std::string(names[i]);
  }
  bad("value of " + opt, v, valid);
}

int8_t on_off(const std::string& opt, const std::string& v) {
  static const char* const names[] = {"off", "on"};
  return int8_t(pick(opt, v, names, 2));
}

AlgoOverride parse(const std::string& s) {
  AlgoOverride o;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t end = s.find(',', pos);
    if (end == std::string::npos) end = s.size();
    std::string item = s.substr(pos, end - pos);
    pos = end + 1;
    // trim spaces
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    if (item.empty()) continue;
    o.active = true;
    const size_t colon = item.find(':'), eq = item.find('=');
    if (colon != std::string::npos && (eq == std::string::npos || colon < eq)) {
      const std::string pass = item.substr(0, colon), name = item.substr(colon + 1);
      int pi = -1;
      std::string passes;
      for (int i = 0; i < int(Pass::kCount); ++i) {
        if (pass == kPassNames[i]) pi = i;
        passes += (i ? "|" : "") + std::string(kPassNames[i]);
      }
      if (pi < 0) bad("pass", pass, passes);
      const Range r = kPassAlgos[pi];
      std::string valid;
      Algo found = Algo::kNone;
      for (int a = int(r.first); a <= int(r.last); ++a) {
        if (name == kAlgoNames[a]) found = Algo(a);
        valid += (a > int(r.first) ? "|" : "") + std::string(kAlgoNames[a]);
      }
      if (found == Algo::kNone) bad(std::string(kPassNames[pi]) + " algorithm", name, valid);
      o.forced[pi] = found;
      continue;
    }
    if (eq == std::string::npos)
      bad("item", item, "pass:algorithm (fwd, dgrad, wgrad, bwd, cpu) or option=value");
    const std::string opt = item.substr(0, eq), v = item.substr(eq + 1);
    Variant& var = o.var;
    if (opt == "loader") {
      static const char* const n[] = {"cpasync", "tma"};
      var.loader = int8_t(pick(opt, v, n, 2));
    } else if (opt == "f16x3") {
      var.f16x3 = on_off(opt, v);
    } else if (opt == "f16x3_persist") {
      var.f16x3_persist = on_off(opt, v);
    } else if (opt == "f16x3_nchw") {
      var.f16x3_nchw = on_off(opt, v);
    } else if (opt == "igemm_tile") {
      static const char* const n[] = {"128x128x1", "128x64", "64x128"};
      var.igemm_tile = int8_t(pick(opt, v, n, 3));
    } else if (opt == "wgrad_tile") {
      var.wgrad_tile = int8_t(pick(opt, v, kWgradTileNames, kWgradTileCount));
    } else if (opt == "wgrad_x") {
      static const char* const n[] = {"copy", "nchw"};
      var.wgrad_x = int8_t(pick(opt, v, n, 2));
    } else if (opt == "direct_nt") {
      static const char* const n[] = {"2", "4", "8"};
      var.direct_nt = int8_t(2 << pick(opt, v, n, 3));
    } else if (opt == "narrow_wp") {
      static const char* const n[] = {"1", "2", "4", "8"};
      var.narrow_wp = int8_t(1 << pick(opt, v, n, 4));
    } else if (opt == "k_splits") {
      int k = 0;
      for (char ch : v) k = (ch >= '0' && ch <= '9' && k < 1000) ? k * 10 + (ch - '0') : 1000;
      if (v.empty() || k < 1 || k > 64) bad("k_splits value", v, "1..64");
      var.k_splits = int8_t(k);
    } else {
      bad("option", opt,
          "loader, f16x3, f16x3_persist, f16x3_nchw, igemm_tile, wgrad_tile, wgrad_x, "
          "direct_nt, narrow_wp, k_splits");
    }
  }
  return o;
}

// Process-wide (autograd runs the backward on its own thread): the latest call of each pass.
std::atomic<int> last_run[int(Pass::kCount)] = {{-1}, {-1}, {-1}, {-1}, {-1}};

}  // namespace

const char* const kWgradTileNames[kWgradTileCount] = {
    "narrow", "wide", "tall", "bigtall", "bigwide", "wg64", "wg128", "wg64k", "wg128k", "nowg"};

const char* algo_name(Algo a) {
  return a > Algo::kNone && a < Algo::kCount ? kAlgoNames[int(a)] : "none";
}
const char* pass_name(Pass p) { return kPassNames[int(p)]; }

const AlgoOverride& algo_override() {
  // One cache per thread: no lock on the hot path. An unset variable costs one getenv.
  thread_local std::string raw;
  thread_local AlgoOverride parsed;
  const char* e = std::getenv("CONVT2D_ALGO");
  if (e == nullptr) e = "";
  if (raw != e) {
    AlgoOverride o = parse(e);  // throws before anything is replaced
    parsed = o;
    raw = e;
  }
  return parsed;
}

void record_algorithm(Pass p, Algo a) {
  last_run[int(p)].store(int(a), std::memory_order_relaxed);
}

std::vector<std::pair<std::string, std::string>> last_algorithms() {
  std::vector<std::pair<std::string, std::string>> out;
  for (int i = 0; i < int(Pass::kCount); ++i) {
    const int a = last_run[i].load(std::memory_order_relaxed);
    if (a >= 0 && a < int(Algo::kCount)) out.emplace_back(kPassNames[i], kAlgoNames[a]);
  }
  return out;
}

}  // namespace convt2d
