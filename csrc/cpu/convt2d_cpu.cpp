// convt2d CPU backend: forward and backward of conv_transpose2d with our own
// kernels (no oneDNN / at::convolution), parallel over the intra-op threads.
//
// Forward and grad_input share one register-blocked micro-kernel (`micro`):
//
//   acc[b][i][j] += sum_c sum_{row taps r} sum_{col taps t}
//                     wpack[tap(r,t)][c][b] * src[c][row(r) + i][x0 + j + coff(t)]
//
// i.e. CB "block" channels (the channels produced: lanes b) times NR rows i
// times NV*L consecutive positions j along a row, reduced over the other
// channel c and the taps. Source rows are zero-padded along the row so every
// vector load is in bounds; weights are repacked so the CB values of one
// (tap, c) are adjacent (one broadcast each) and consecutive c are adjacent.
//
// * forward, per stride phase (common/problem.h): block = output channels,
//   c = input channels, src = the input, row taps = the ky reaching this phase
//   row, column taps = the kx reaching this phase column. Along a phase row
//   consecutive outputs q read consecutive inputs (ix = q0 + q - koff0 -
//   jx*koff_step), so loads are contiguous; the result row (contiguous in q)
//   is scattered into the output with step stride_w. No tap is ever visited
//   for an output it does not reach; phases that no tap reaches hold the bias.
// * grad_input (a strided, dilated conv2d of grad_output): block = input
//   channels, c = output channels, src = grad_output de-interleaved by column
//   phase (plane r holds columns m*sw + r), so for every kx the row read is
//   contiguous in ix.
// * grad_weight: per tap, a dot-product GEMM over positions of the padded
//   input and the grad_output planes (4x3 channel register blocks, tiles and
//   row chunks for the caches); each weight element is summed by one task in
//   a fixed order: deterministic.
// * grad_bias: per-channel sums in a fixed order.
//
// Rows whose taps all fall inside the source ("interior") are computed NR at
// a time; edge rows one at a time with their taps clipped. The block shape
// (CB, NV, NR) is picked per call from the row widths and channel counts.
// Buffers are laid out [image][row][channel][column], so sweeping channels at
// fixed taps reads memory sequentially. Images are processed in chunks that
// bound the buffers (about 64 MiB, at least one image); offsets are int64.
// 16-bit types are converted to float in those buffers (accumulation in
// float), float64 works in double. The hot loops are compiled twice: for
// AVX2+FMA (chosen at run time when the CPU has it) and for the baseline ISA.
//
// CONVT2D_ALGO=cpu:baseline forces the baseline-ISA kernels (tests).
#include "common/algo.h"
#include "glue.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

namespace convt2d {
namespace {

#if defined(__GNUC__) || defined(__clang__)
#define CT_AI inline __attribute__((always_inline))
#define CT_UNROLL _Pragma("GCC unroll 16")
#else
#define CT_AI inline
#define CT_UNROLL
#endif

#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
#define CT_X86 1
#define CT_AVX2 __attribute__((target("avx2,fma")))
// The AVX2 kernels where the CPU has AVX2 + FMA, unless CONVT2D_ALGO=cpu:baseline forces
// the baseline-ISA ones (tests).
static bool cpu_has_avx2() {
  static const bool v = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return v && algo_override().get(Pass::kCpu) != Algo::kCpuBaseline;
}
#else
#define CT_X86 0
#endif

// ---------------------------------------------------------------------------
// 32-byte vectors (GCC/clang vector extensions; a plain struct elsewhere).
// ---------------------------------------------------------------------------
template <typename A> struct Vec;
#if defined(__GNUC__) || defined(__clang__)
template <> struct Vec<float> {
  static constexpr int L = 8;
  typedef float V __attribute__((vector_size(32)));
  typedef float U __attribute__((vector_size(32), aligned(4), may_alias));
};
template <> struct Vec<double> {
  static constexpr int L = 4;
  typedef double V __attribute__((vector_size(32)));
  typedef double U __attribute__((vector_size(32), aligned(8), may_alias));
};
template <typename A> CT_AI typename Vec<A>::V vload(const A* p) {
  return *reinterpret_cast<const typename Vec<A>::U*>(p);
}
template <typename A> CT_AI void vstore(A* p, typename Vec<A>::V v) {
  *reinterpret_cast<typename Vec<A>::U*>(p) = v;
}
template <typename A> CT_AI typename Vec<A>::V vzero() { return typename Vec<A>::V{}; }
#else
template <typename A, int N> struct VArr {
  A v[N];
  VArr& operator+=(const VArr& o) { for (int i = 0; i < N; ++i) v[i] += o.v[i]; return *this; }
  VArr operator*(const VArr& o) const { VArr r; for (int i = 0; i < N; ++i) r.v[i] = v[i] * o.v[i]; return r; }
  VArr operator*(A s) const { VArr r; for (int i = 0; i < N; ++i) r.v[i] = v[i] * s; return r; }
  A operator[](int i) const { return v[i]; }
};
template <> struct Vec<float> { static constexpr int L = 8; using V = VArr<float, 8>; };
template <> struct Vec<double> { static constexpr int L = 4; using V = VArr<double, 4>; };
template <typename A> CT_AI typename Vec<A>::V vload(const A* p) {
  typename Vec<A>::V r; std::memcpy(r.v, p, sizeof(r.v)); return r;
}
template <typename A> CT_AI void vstore(A* p, typename Vec<A>::V v) { std::memcpy(p, v.v, sizeof(v.v)); }
template <typename A> CT_AI typename Vec<A>::V vzero() {
  typename Vec<A>::V r; for (int i = 0; i < Vec<A>::L; ++i) r.v[i] = A(0); return r;
}
#endif

template <typename T> using acc_t = std::conditional_t<std::is_same<T, double>::value, double, float>;

constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
constexpr int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }
inline int64_t floor_mod(int64_t a, int64_t b) { return a - floor_div(a, b) * b; }

// ---------------------------------------------------------------------------
// The micro-kernel: CB block channels x NR rows x NV vectors of L positions.
//   rows[r]  : source row of channel 0 for row tap r (channel c adds c*scs)
//   roff[i]  : offset of the source of output row i (of NR) from rows[r]
//   roww[r]  : offset of the weights of row tap r
//   coff[t]  : source column offset of column tap t (relative to rows[r] + x0)
//   cw[t]    : offset of the weights of column tap t (added to roww[r])
//   w        : packed weights: tap (r, t), channel c at w + roww[r] + cw[t] + c*CB
//   out      : [CB][NR][NV*L] results
// Every (c, r, t) step: NR*NV vector loads, CB broadcasts, CB*NR*NV FMAs.
// The channels go in blocks of kCBlk, taps outside, channels inside: the
// block's source rows stay in L1 across the taps and the innermost loop is
// two pointer increments (weights contiguous).
// ---------------------------------------------------------------------------
constexpr int64_t kCBlk = 32;
template <typename A, int CB, int NV, int NR>
CT_AI void micro(const A* const* rows, const int64_t* roff, const int64_t* roww, int64_t nrow,
                 const int64_t* coff, const int64_t* cw, int64_t ncol, int64_t C, int64_t scs,
                 const A* w, int64_t x0, A* out) {
  using V = typename Vec<A>::V;
  constexpr int L = Vec<A>::L;
  constexpr int NX = NV * NR;
  V acc[CB][NX];
  CT_UNROLL for (int b = 0; b < CB; ++b) {
    CT_UNROLL for (int j = 0; j < NX; ++j) acc[b][j] = vzero<A>();
  }
  int64_t ro[NR];
  CT_UNROLL for (int i = 0; i < NR; ++i) ro[i] = roff[i] + x0;
  for (int64_t c0 = 0; c0 < C; c0 += kCBlk) {
    const int64_t cn = std::min(kCBlk, C - c0);
    for (int64_t r = 0; r < nrow; ++r) {
      for (int64_t t = 0; t < ncol; ++t) {
        const A* sp = rows[r] + coff[t] + c0 * scs;
        const A* wp = w + roww[r] + cw[t] + c0 * CB;
        for (int64_t c = 0; c < cn; ++c, sp += scs, wp += CB) {
          V xv[NX];
          CT_UNROLL for (int i = 0; i < NR; ++i) {
            CT_UNROLL for (int j = 0; j < NV; ++j) xv[i * NV + j] = vload<A>(sp + ro[i] + j * L);
          }
          CT_UNROLL for (int b = 0; b < CB; ++b) {
            const A wb = wp[b];  // vector * scalar: one vbroadcastss from memory
            CT_UNROLL for (int j = 0; j < NX; ++j) acc[b][j] += xv[j] * wb;
          }
        }
      }
    }
  }
  CT_UNROLL for (int b = 0; b < CB; ++b) {
    CT_UNROLL for (int j = 0; j < NX; ++j) vstore<A>(out + (b * NX + j) * L, acc[b][j]);
  }
}

// Register-block shapes (CB lanes, NV vectors per row, NR rows): 12 vector
// accumulators, which with the NV*NR loads and a broadcast fit the 16 AVX2
// registers. Several rows per block serve narrow rows (small images, strided
// phases): the broadcast weights are then shared by more loads.
struct Cfg { int cb, nv, nr; };
constexpr int kNumCfg = 5;
constexpr Cfg kCfgs[kNumCfg] = {{12, 1, 1}, {6, 2, 1}, {4, 3, 1}, {6, 1, 2}, {4, 1, 3}};

// Calls f(CB, NV, NR) (as integral constants) for configuration `idx`.
template <typename F> void with_cfg(int idx, F&& f) {
  using std::integral_constant;
  switch (idx) {
    case 0: f(integral_constant<int, 12>{}, integral_constant<int, 1>{}, integral_constant<int, 1>{}); break;
    case 1: f(integral_constant<int, 6>{}, integral_constant<int, 2>{}, integral_constant<int, 1>{}); break;
    case 2: f(integral_constant<int, 4>{}, integral_constant<int, 3>{}, integral_constant<int, 1>{}); break;
    case 3: f(integral_constant<int, 6>{}, integral_constant<int, 1>{}, integral_constant<int, 2>{}); break;
    default: f(integral_constant<int, 4>{}, integral_constant<int, 1>{}, integral_constant<int, 3>{}); break;
  }
}

// Work shape for choosing a block: `C` block channels; row segments, each
// {width, interior rows, boundary rows, weight}. Interior rows (all taps in
// range) are grouped NR at a time; boundary rows run one by one.
struct RowShape { int64_t width, interior, boundary; double weight; };

// The block shape that wastes least on padding (lanes past C, positions past
// the width, rows past a group), preferring fewer loads per FMA.
inline int pick_cfg(int64_t C, const std::vector<RowShape>& segs, int L) {
  // Measured preferences (AVX2): 12 broadcasts per load is slowest; row
  // groups cost a little more than one wide row (more streams).
  const double pref[kNumCfg] = {0.80, 0.95, 1.0, 0.90, 0.92};
  int best = 2;
  double best_score = -1;
  for (int i = 0; i < kNumCfg; ++i) {
    const Cfg& k = kCfgs[i];
    const int64_t vw = int64_t(k.nv) * L;
    double used = 0, spent = 0;
    for (const RowShape& sg : segs) {
      const double rows = double(sg.interior + sg.boundary);
      // a boundary row runs alone, with fewer accumulators: about 1.3 rows
      const double cost = double(round_up(sg.interior, k.nr)) +
                          double(sg.boundary) * (k.nr > 1 ? 1.3 : 1.0);
      used += sg.weight * double(sg.width) * rows;
      spent += sg.weight * double(round_up(sg.width, vw)) * cost;
    }
    const double ew = spent > 0 ? used / spent : 1.0;
    const double ec = double(C) / double(round_up(C, k.cb));
    const double score = ew * ec * pref[i];
    if (score > best_score + 1e-12) { best_score = score; best = i; }
  }
  return best;
}

// ---------------------------------------------------------------------------
// Threads. at::parallel_for is header code that is parallel only when this
// file is compiled with -fopenmp (ATen/Parallel-inl.h: INTRA_OP_PARALLEL);
// then torch's OpenMP team is used. Without it, plain std::threads are
// started per parallel region (tens of microseconds each; safe after fork(),
// unlike a persistent pool inherited from the parent). body(tid) runs once
// per tid in [0, nt); exceptions are passed to the caller. A thread that cannot be
// started (std::system_error: a thread or memory limit) is not an error: its tids run on
// the calling thread. (A std::vector<std::thread> unwound by that exception would
// destroy joinable threads, and std::terminate would abort the process with
// "terminate called without an active exception".)
// ---------------------------------------------------------------------------
template <typename F> void run_threads(int64_t nt, const F& body) {
#if defined(_OPENMP)
  at::parallel_for(0, nt, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) body(i);
  });
#else
  std::exception_ptr err;
  std::mutex em;
  auto guarded = [&](int64_t i) {
    try {
      body(i);
    } catch (...) {
      std::lock_guard<std::mutex> g(em);
      if (!err) err = std::current_exception();
    }
  };
  std::vector<std::thread> th;
  int64_t started = 1;
  try {
    th.reserve(size_t(nt - 1));
    for (; started < nt; ++started) th.emplace_back(guarded, started);
  } catch (const std::exception&) {  // std::system_error, std::bad_alloc: run the rest here
  }
  guarded(0);
  for (int64_t i = started; i < nt; ++i) guarded(i);
  for (auto& t : th) t.join();
  if (err) std::rethrow_exception(err);
#endif
}

// Runs f(b, e) over [0, ntask), handing out chunks of consecutive tasks from a
// shared counter (dynamic scheduling: tasks of unequal cost, or a thread that
// gets descheduled, do not hold the others up). At most one thread per
// `grain` tasks. Which thread runs a task never changes what it computes.
template <typename F> void parallel_tasks(int64_t ntask, int64_t grain, const F& f) {
  if (ntask <= 0) return;
  const int64_t nt = std::min<int64_t>(at::get_num_threads(), ceil_div(ntask, grain));
  if (nt <= 1 || at::in_parallel_region()) { f(int64_t(0), ntask); return; }
  const int64_t chunk = std::max<int64_t>(1, ntask / (nt * 16));
  std::atomic<int64_t> next{0};
  run_threads(nt, [&](int64_t) {
    for (;;) {
      const int64_t b = next.fetch_add(chunk, std::memory_order_relaxed);
      if (b >= ntask) break;
      f(b, std::min(ntask, b + chunk));
    }
  });
}

// Strided 4-D view of a tensor's data (element strides).
template <typename T> struct View4 {
  T* p;
  int64_t s0, s1, s2, s3;
  explicit View4(const at::Tensor& t)
      : p(static_cast<T*>(t.data_ptr())), s0(t.stride(0)), s1(t.stride(1)), s2(t.stride(2)),
        s3(t.stride(3)) {}
};

// dst[((nn*H + h)*C + c)*Wd + PL + w] = src[n0+nn, c, h, w]; other columns 0.
// Row-major over (h, c): the rows of all channels at one height are adjacent,
// so a kernel sweeping the channels at fixed taps reads memory sequentially.
template <typename T, typename A>
void pad_rows(const View4<const T>& src, int64_t n0, int64_t nimg, int64_t C, int64_t H,
              int64_t W, A* dst, int64_t Wd, int64_t PL) {
  const int64_t nrows = nimg * C * H;
  parallel_tasks(nrows, std::max<int64_t>(1, 32768 / Wd), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const int64_t c = r % C, h = (r / C) % H, nn = r / (C * H);
      A* d = dst + r * Wd;
      const T* s = src.p + (n0 + nn) * src.s0 + c * src.s1 + h * src.s2;
      for (int64_t i = 0; i < PL; ++i) d[i] = A(0);
      if (src.s3 == 1) {
        for (int64_t x = 0; x < W; ++x) d[PL + x] = static_cast<A>(s[x]);
      } else {
        for (int64_t x = 0; x < W; ++x) d[PL + x] = static_cast<A>(s[x * src.s3]);
      }
      for (int64_t i = PL + W; i < Wd; ++i) d[i] = A(0);
    }
  });
}

// ---------------------------------------------------------------------------
// Forward
// ---------------------------------------------------------------------------
struct Phase {
  int64_t ry, rx;
  PhaseDim y, x;
  int64_t tap_off;  // taps of the phases before this one (weight packing)
};

// One forward work row: `nr` == 0: the single phase row qy, taps clipped to
// the input; `nr` >= 1: phase rows qy .. qy+nr-1, all interior (every tap in
// range), computed together by the NR-row kernel.
struct RowTask { int64_t phase, qy, nr; };

// Interior rows of a phase: all taps jy in range, i.e.
// 0 <= q0 + q - koff0 - (ntap-1)*koff_step and q0 + q - koff0 <= H-1.
inline void phase_interior(const PhaseDim& y, int64_t H, int64_t& qa, int64_t& qb) {
  qa = std::max<int64_t>(0, y.koff0 + (y.ntap - 1) * y.koff_step - y.q0);
  qb = std::min<int64_t>(y.nq - 1, H - 1 + y.koff0 - y.q0);
}

template <typename T, typename A> struct FwdCtx {
  const Problem* p;
  const std::vector<Phase>* phases;
  const std::vector<RowTask>* rowlist;
  const A* xp;       // padded input [nimg][H][Cin][Wp]
  int64_t Wp, PL;
  const A* wpk;      // packed weights [G][ncbk][phase][ntap_y][ntap_x][Cig][CB]
  int64_t ncbk;
  const A* bias;     // [Cout] or nullptr
  View4<T> out;
  int64_t n0;        // first image of this chunk
};

template <typename T, typename A, int CB, int NV, int NR>
CT_AI void fwd_tasks(const FwdCtx<T, A>& c, int64_t tb, int64_t te) {
  constexpr int L = Vec<A>::L;
  constexpr int64_t VW = int64_t(NV) * L;
  const Problem& p = *c.p;
  const int64_t Cig = p.cin_g(), Cog = p.cout_g(), G = p.groups;
  const int64_t nrows_tot = int64_t(c.rowlist->size());
  const int64_t rstride = p.Cin * c.Wp;  // one input row (all channels) in the buffer
  std::vector<const A*> rows(p.kh);
  std::vector<int64_t> roww(p.kh), coff(p.kw), cw(p.kw);
  int64_t roff[NR];
  alignas(64) A tmp[CB * NR * VW];
  for (int64_t t = tb; t < te; ++t) {
    // task = ((nn*G + g)*ncbk + cbk)*nrows_tot + row
    const int64_t row = t % nrows_tot;
    int64_t rest = t / nrows_tot;
    const int64_t cbk = rest % c.ncbk; rest /= c.ncbk;
    const int64_t g = rest % G;
    const int64_t nn = rest / G;
    const RowTask& rt = (*c.rowlist)[row];
    const Phase& ph = (*c.phases)[rt.phase];
    const int64_t nqx = ph.x.nq;

    // Source rows: phase row q receives tap jy from input row
    // iy = q0 + q - koff0 - jy*koff_step (skipped when outside [0, H)); the
    // next phase row reads the next input row. The column of output q
    // (tap jx = 0) is ix = q0x + q - koff0x, so the row pointer is shifted by
    // q0x - koff0x; tap jx reads koff_step_x*jx further left.
    const A* xbase = c.xp + (nn * p.H * p.Cin + g * Cig) * c.Wp + c.PL + (ph.x.q0 - ph.x.koff0);
    const int64_t nr = rt.nr == 0 ? 1 : rt.nr;
    int64_t nrow = 0;
    for (int64_t jy = 0; jy < ph.y.ntap; ++jy) {
      const int64_t iy = ph.y.q0 + rt.qy - ph.y.koff0 - jy * ph.y.koff_step;
      if (iy < 0 || iy >= p.H) continue;  // never for interior rows
      rows[nrow] = xbase + iy * rstride;
      roww[nrow] = jy * ph.x.ntap * Cig * CB;
      ++nrow;
    }
    const int64_t ncol = ph.x.ntap;
    for (int64_t jx = 0; jx < ncol; ++jx) {
      coff[jx] = -jx * ph.x.koff_step;
      cw[jx] = jx * Cig * CB;
    }
    // Rows past the group's end repeat its last row (results dropped).
    for (int i = 0; i < NR; ++i) roff[i] = std::min<int64_t>(i, nr - 1) * rstride;
    // This phase's weights: [ntap_y][ntap_x][Cig][CB], dense.
    const A* w = c.wpk + ((g * c.ncbk + cbk) * p.kh * p.kw + ph.tap_off) * Cig * CB;
    const int64_t co0 = g * Cog + cbk * CB;
    const int64_t nb = std::min<int64_t>(CB, Cog - cbk * CB);
    for (int64_t x0 = 0; x0 < nqx; x0 += VW) {
      int64_t nx;  // rows computed by this call
      if (rt.nr == 0) {
        micro<A, CB, NV, 1>(rows.data(), roff, roww.data(), nrow, coff.data(), cw.data(), ncol,
                            Cig, c.Wp, w, x0, tmp);
        nx = 1;
      } else {
        micro<A, CB, NV, NR>(rows.data(), roff, roww.data(), nrow, coff.data(), cw.data(), ncol,
                             Cig, c.Wp, w, x0, tmp);
        nx = NR;
      }
      // Scatter: phase (row q, column q') -> output (oy, ox) =
      // ((q0y + q)*sh + ry - ph, (q0x + q')*sw + rx - pw).
      const int64_t nv = std::min<int64_t>(VW, nqx - x0);
      const int64_t ox0 = (ph.x.q0 + x0) * p.sw + ph.rx - p.pw;
      const int64_t ostep = p.sw * c.out.s3;
      for (int64_t i = 0; i < nr; ++i) {
        const int64_t oy = (ph.y.q0 + rt.qy + i) * p.sh + ph.ry - p.ph;
        T* obase = c.out.p + (c.n0 + nn) * c.out.s0 + oy * c.out.s2 + ox0 * c.out.s3 +
                   co0 * c.out.s1;
        if (c.out.s1 == 1) {  // channels-last: the CB channels are adjacent
          for (int64_t j = 0; j < nv; ++j)
            for (int64_t b = 0; b < nb; ++b)
              obase[j * ostep + b] = static_cast<T>(tmp[(b * nx + i) * VW + j] +
                                                    (c.bias ? c.bias[co0 + b] : A(0)));
        } else {
          for (int64_t b = 0; b < nb; ++b) {
            const A bv = c.bias ? c.bias[co0 + b] : A(0);
            T* o = obase + b * c.out.s1;
            const A* s = tmp + (b * nx + i) * VW;
            for (int64_t j = 0; j < nv; ++j) o[j * ostep] = static_cast<T>(s[j] + bv);
          }
        }
      }
    }
  }
}

// Each hot loop is compiled for the baseline ISA and, on x86, for AVX2+FMA.
#define CT_DEFINE_WORKERS(NAME, CTX)                                                        \
  template <typename T, typename A, int CB, int NV, int NR>                                 \
  void NAME##_base(const CTX<T, A>& c, int64_t b, int64_t e) {                              \
    NAME<T, A, CB, NV, NR>(c, b, e);                                                        \
  }                                                                                         \
  CT_AVX2_WORKER(NAME, CTX)
#if CT_X86
#define CT_AVX2_WORKER(NAME, CTX)                                                           \
  template <typename T, typename A, int CB, int NV, int NR>                                 \
  CT_AVX2 void NAME##_avx2(const CTX<T, A>& c, int64_t b, int64_t e) {                      \
    NAME<T, A, CB, NV, NR>(c, b, e);                                                        \
  }
#else
#define CT_AVX2_WORKER(NAME, CTX)
#endif
CT_DEFINE_WORKERS(fwd_tasks, FwdCtx)

// Images per chunk so that a per-chunk buffer stays near `budget` bytes.
inline int64_t images_per_chunk(int64_t N, int64_t bytes_per_image, int64_t budget = 64 << 20) {
  return std::max<int64_t>(1, std::min<int64_t>(N, budget / std::max<int64_t>(1, bytes_per_image)));
}

// Forward weights, per stride phase: [G][ncbk][phase][ntap_y][ntap_x][Cig][CB]
// with lane b = output channel cbk*CB + b of the group (0 past Cog); phase i
// starts at tap offset phases[i].tap_off (in units of Cig*CB). Read in source
// order (w[ci][co][ky][kx]: a run of kh*kw per lane), written per tap.
template <typename T, typename A>
std::vector<A> pack_weights_fwd(const at::Tensor& weight, const Problem& p, int64_t CB,
                                const std::vector<Phase>& phases) {
  const View4<const T> w(weight);
  const int64_t G = p.groups, Cig = p.cin_g(), Cog = p.cout_g(), K = p.kh * p.kw;
  const int64_t ncbk = ceil_div(Cog, CB);
  // Tap (ky, kx) -> offset inside a (g, cbk) block and stride per input
  // channel; -1 for taps of phases without outputs.
  std::vector<int64_t> tbase(size_t(K), -1), tstride(size_t(K), 0);
  for (const Phase& ph : phases)
    for (int64_t jy = 0; jy < ph.y.ntap; ++jy)
      for (int64_t jx = 0; jx < ph.x.ntap; ++jx) {
        const int64_t k = (ph.y.k0 + jy * ph.y.kstep) * p.kw + ph.x.k0 + jx * ph.x.kstep;
        tbase[k] = (ph.tap_off + jy * ph.x.ntap + jx) * Cig * CB;
        tstride[k] = CB;
      }
  std::vector<A> out(size_t(G * ncbk * K * Cig * CB), A(0));
  parallel_tasks(G * ncbk * Cig, std::max<int64_t>(1, 4096 / (K * CB)), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const int64_t ci = i % Cig, gb = i / Cig, g = gb / ncbk, cbk = gb % ncbk;
      A* d = out.data() + gb * K * Cig * CB;
      for (int64_t lane = 0; lane < CB && cbk * CB + lane < Cog; ++lane) {
        const T* src = w.p + (g * Cig + ci) * w.s0 + (cbk * CB + lane) * w.s1;
        for (int64_t ky = 0; ky < p.kh; ++ky)
          for (int64_t kx = 0; kx < p.kw; ++kx) {
            const int64_t k = ky * p.kw + kx;
            if (tbase[k] >= 0)
              d[tbase[k] + ci * tstride[k] + lane] = static_cast<A>(src[ky * w.s2 + kx * w.s3]);
          }
      }
    }
  });
  return out;
}

template <typename T, int CB, int NV, int NR>
void forward_impl(const Problem& p, const at::Tensor& input, const at::Tensor& weight,
                  const std::optional<at::Tensor>& bias, at::Tensor& out) {
  using A = acc_t<T>;
  constexpr int L = Vec<A>::L;
  constexpr int64_t VW = int64_t(NV) * L;
  const int64_t G = p.groups;

  // Phases with outputs and taps (ry-major); the padding each needs so all
  // loads hit the buffer: columns read are ix = q0x - koff0x + q - jx*koff_step_x
  // for q in [0, round_up(nqx, VW)), jx in [0, ntapx). Phases reached by no tap
  // (stride > dilated kernel) only hold the bias: the output is pre-filled.
  std::vector<Phase> phases;
  bool has_empty = false;
  int64_t PL = 0, PR = 0;
  for (int64_t ry = 0; ry < p.sh; ++ry) {
    const PhaseDim y = make_phase_dim(ry, p.sh, p.ph, p.dh, p.kh, p.Ho);
    if (y.nq == 0) continue;
    for (int64_t rx = 0; rx < p.sw; ++rx) {
      const PhaseDim x = make_phase_dim(rx, p.sw, p.pw, p.dw, p.kw, p.Wo);
      if (x.nq == 0) continue;
      if (y.ntap == 0 || x.ntap == 0) { has_empty = true; continue; }
      phases.push_back({ry, rx, y, x, 0});
      const int64_t lo = x.q0 - x.koff0 - (x.ntap - 1) * x.koff_step;
      const int64_t hi = x.q0 - x.koff0 + round_up(x.nq, VW) - 1;
      PL = std::max(PL, -lo);
      PR = std::max(PR, hi - (p.W - 1));
    }
  }
  if (has_empty) {
    if (bias.has_value() && bias->defined()) out.copy_(bias->view({1, p.Cout, 1, 1}).expand_as(out));
    else out.zero_();
  }
  int64_t tap_tot = 0;
  for (auto& ph : phases) { ph.tap_off = tap_tot; tap_tot += ph.y.ntap * ph.x.ntap; }
  // Work rows ordered (ry, q, rx): the phases of one output row run back to
  // back, so the row's cache lines are complete before they are evicted.
  // Interior rows go NR at a time, boundary rows one by one.
  std::vector<RowTask> rowlist;
  for (size_t i = 0; i < phases.size();) {
    size_t j = i;
    while (j < phases.size() && phases[j].ry == phases[i].ry) ++j;
    const PhaseDim& y = phases[i].y;
    int64_t qa, qb;
    phase_interior(y, p.H, qa, qb);
    if (NR == 1) { qa = y.nq; qb = -1; }
    for (int64_t q = 0; q < y.nq;) {
      const int64_t nr = (q >= qa && q <= qb) ? std::min<int64_t>(NR, qb + 1 - q) : 0;
      for (size_t k = i; k < j; ++k) rowlist.push_back({int64_t(k), q, nr});
      q += std::max<int64_t>(nr, 1);
    }
    i = j;
  }
  if (rowlist.empty()) return;

  const int64_t ncbk = ceil_div(p.cout_g(), CB);
  std::vector<A> wpk = pack_weights_fwd<T, A>(weight, p, CB, phases);
  std::vector<A> bvec;
  if (bias.has_value() && bias->defined()) {
    const at::Tensor b = bias->contiguous();
    const T* bp = b.data_ptr<T>();
    bvec.resize(size_t(p.Cout));
    for (int64_t i = 0; i < p.Cout; ++i) bvec[i] = static_cast<A>(bp[i]);
  }

  const int64_t Wp = PL + p.W + PR;
  const int64_t nchunk = images_per_chunk(p.N, p.Cin * p.H * Wp * int64_t(sizeof(A)));
  std::vector<A> xp(size_t(std::min(nchunk, p.N) * p.Cin * p.H * Wp));
  const View4<const T> xin(input);
  FwdCtx<T, A> c{&p, &phases, &rowlist, xp.data(), Wp, PL, wpk.data(), ncbk,
                 bvec.empty() ? nullptr : bvec.data(), View4<T>(out), 0};
  auto worker = &fwd_tasks_base<T, A, CB, NV, NR>;
#if CT_X86
  if (cpu_has_avx2()) worker = &fwd_tasks_avx2<T, A, CB, NV, NR>;
#endif
  for (int64_t n0 = 0; n0 < p.N; n0 += nchunk) {
    const int64_t nimg = std::min(nchunk, p.N - n0);
    pad_rows<T, A>(xin, n0, nimg, p.Cin, p.H, p.W, xp.data(), Wp, PL);
    c.n0 = n0;
    const int64_t ntask = nimg * G * ncbk * int64_t(rowlist.size());
    parallel_tasks(ntask, 1, [&](int64_t b, int64_t e) { worker(c, b, e); });
  }
}


at::Tensor forward_cpu(const at::Tensor& input, const at::Tensor& weight,
                       const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
                       at::IntArrayRef padding, at::IntArrayRef output_padding, int64_t groups,
                       at::IntArrayRef dilation) {
  const Problem p = make_problem(input, weight, bias, stride, padding, output_padding, groups,
                                 dilation);
  const auto fmt = suggest_memory_format(input, weight);
  at::Tensor out = at::empty({p.N, p.Cout, p.Ho, p.Wo}, input.options().memory_format(fmt));
  if (out.numel() == 0) return out;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, input.scalar_type(), "convt2d_forward_cpu", [&] {
    using A = acc_t<scalar_t>;
    // Work shape: every (row phase, column phase) pair with taps, weighted
    // by its taps.
    std::vector<RowShape> segs;
    for (int64_t ry = 0; ry < p.sh; ++ry) {
      const PhaseDim y = make_phase_dim(ry, p.sh, p.ph, p.dh, p.kh, p.Ho);
      if (y.nq == 0 || y.ntap == 0) continue;
      int64_t qa, qb;
      phase_interior(y, p.H, qa, qb);
      const int64_t inner = std::max<int64_t>(0, qb - qa + 1);
      for (int64_t rx = 0; rx < p.sw; ++rx) {
        const PhaseDim x = make_phase_dim(rx, p.sw, p.pw, p.dw, p.kw, p.Wo);
        if (x.nq > 0 && x.ntap > 0)
          segs.push_back({x.nq, inner, y.nq - inner, double(y.ntap * x.ntap)});
      }
    }
    with_cfg(pick_cfg(p.cout_g(), segs, Vec<A>::L), [&](auto cb, auto nv, auto nr) {
      forward_impl<scalar_t, decltype(cb)::value, decltype(nv)::value, decltype(nr)::value>(
          p, input, weight, bias, out);
    });
  });
  return out;
}

// ---------------------------------------------------------------------------
// Backward
// ---------------------------------------------------------------------------
// grad_output de-interleaved by column phase: for the column taps kx used by
// the conv2d that gives grad_input, output column ox = ix*sw - pw + kx*dw.
// With t = kx*dw - pw = mx*sw + rx (0 <= rx < sw): ox = (ix + mx)*sw + rx.
// Plane rx holds go columns m*sw + rx for m in [m_lo, m_hi] (0 where outside
// [0, Wo)), so tap kx reads plane rx at m = ix + mx: contiguous in ix.
struct Planes {
  std::vector<int64_t> rx_of_plane;   // column phase of each stored plane
  std::vector<int64_t> plane_of_kx;   // plane index for tap kx
  std::vector<int64_t> m_of_kx;       // mx for tap kx
  int64_t m_lo = 0, m_hi = 0, Lp = 0, P = 0;
};

inline Planes make_planes(const Problem& p, int64_t ix_end /* exclusive, padded */) {
  Planes pl;
  std::vector<int64_t> idx(size_t(p.sw), -1);
  int64_t mmin = INT64_MAX, mmax = INT64_MIN;
  for (int64_t kx = 0; kx < p.kw; ++kx) {
    const int64_t t = kx * p.dw - p.pw;
    const int64_t rx = floor_mod(t, p.sw), mx = floor_div(t, p.sw);
    if (idx[rx] < 0) { idx[rx] = int64_t(pl.rx_of_plane.size()); pl.rx_of_plane.push_back(rx); }
    pl.plane_of_kx.push_back(idx[rx]);
    pl.m_of_kx.push_back(mx);
    mmin = std::min(mmin, mx);
    mmax = std::max(mmax, mx);
  }
  pl.m_lo = mmin;
  pl.m_hi = ix_end - 1 + mmax;
  pl.Lp = pl.m_hi - pl.m_lo + 1;
  pl.P = int64_t(pl.rx_of_plane.size());
  return pl;
}

// grad_input weights: [G][ncbk][kh][kw][Cog][CB], lane b = input channel
// cbk*CB + b of the group (0 past Cig).
template <typename T, typename A>
std::vector<A> pack_weights_gi(const at::Tensor& weight, const Problem& p, int64_t CB) {
  const View4<const T> w(weight);
  const int64_t G = p.groups, Cig = p.cin_g(), Cog = p.cout_g(), K = p.kh * p.kw;
  const int64_t ncbk = ceil_div(Cig, CB);
  std::vector<A> out(size_t(G * ncbk * Cog * K * CB), A(0));
  parallel_tasks(G * ncbk * Cog, std::max<int64_t>(1, 4096 / (K * CB)), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const int64_t co = i % Cog, gb = i / Cog, cbk = gb % ncbk, g = gb / ncbk;
      A* d = out.data() + (gb * K * Cog + co) * CB;
      for (int64_t lane = 0; lane < CB && cbk * CB + lane < Cig; ++lane) {
        const T* s = w.p + (g * Cig + cbk * CB + lane) * w.s0 + co * w.s1;
        for (int64_t ky = 0; ky < p.kh; ++ky)
          for (int64_t kx = 0; kx < p.kw; ++kx)
            d[(ky * p.kw + kx) * Cog * CB + lane] = static_cast<A>(s[ky * w.s2 + kx * w.s3]);
      }
    }
  });
  return out;
}

// gd[((nn*Ho + oy)*Cout + co)*P + pi][m - m_lo] = go[n0+nn, co, oy, m*sw + rx(pi)] or 0.
template <typename T, typename A>
void build_planes(const View4<const T>& go, const Problem& p, const Planes& pl, int64_t n0,
                  int64_t nimg, A* gd) {
  const int64_t nrows = nimg * p.Cout * p.Ho;
  parallel_tasks(nrows, std::max<int64_t>(1, 32768 / (pl.P * pl.Lp)), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const int64_t co = r % p.Cout, oy = (r / p.Cout) % p.Ho, nn = r / (p.Cout * p.Ho);
      const T* s = go.p + (n0 + nn) * go.s0 + co * go.s1 + oy * go.s2;
      A* d = gd + r * pl.P * pl.Lp;
      for (int64_t pi = 0; pi < pl.P; ++pi, d += pl.Lp) {
        const int64_t rx = pl.rx_of_plane[pi];
        // m with 0 <= m*sw + rx < Wo: m in [ceil(-rx/sw), floor((Wo-1-rx)/sw)].
        const int64_t a = std::max(pl.m_lo, floor_div(-rx + p.sw - 1, p.sw));
        const int64_t z = std::min(pl.m_hi, floor_div(p.Wo - 1 - rx, p.sw));
        int64_t m = pl.m_lo;
        for (; m < a && m <= pl.m_hi; ++m) d[m - pl.m_lo] = A(0);
        for (; m <= z; ++m) d[m - pl.m_lo] = static_cast<A>(s[(m * p.sw + rx) * go.s3]);
        for (; m <= pl.m_hi; ++m) d[m - pl.m_lo] = A(0);
      }
    }
  });
}

// grad_input rows iy with every tap ky in range: 0 <= iy*sh - ph and
// iy*sh - ph + (kh-1)*dh <= Ho-1.
inline void gi_interior(const Problem& p, int64_t& ia, int64_t& ib) {
  ia = std::max<int64_t>(0, ceil_div(p.ph, p.sh));
  ib = std::min<int64_t>(p.H - 1, floor_div(p.Ho - 1 + p.ph - (p.kh - 1) * p.dh, p.sh));
}

template <typename T, typename A> struct GiCtx {
  const Problem* p;
  const Planes* pl;
  const std::vector<std::pair<int64_t, int64_t>>* rowlist;  // (iy, nr) as in RowTask
  const A* gd;       // planes [nimg][Ho][Cout][P][Lp]
  const A* wpk;      // packed weights [G][ncbk][kh][kw][Cog][CB] (lanes: input channels)
  int64_t ncbk;
  View4<T> gi;
  int64_t n0;
};

template <typename T, typename A, int CB, int NV, int NR>
CT_AI void gi_tasks(const GiCtx<T, A>& c, int64_t tb, int64_t te) {
  constexpr int L = Vec<A>::L;
  constexpr int64_t VW = int64_t(NV) * L;
  const Problem& p = *c.p;
  const Planes& pl = *c.pl;
  const int64_t Cig = p.cin_g(), Cog = p.cout_g(), G = p.groups;
  const int64_t rowlen = pl.P * pl.Lp;         // one go row of one channel (all planes)
  const int64_t rstride = p.sh * p.Cout * rowlen;  // next grad_input row: sh go rows down
  const int64_t nrows_tot = int64_t(c.rowlist->size());
  std::vector<const A*> rows(p.kh);
  std::vector<int64_t> roww(p.kh), coff(p.kw), cw(p.kw);
  for (int64_t kx = 0; kx < p.kw; ++kx) {
    coff[kx] = pl.plane_of_kx[kx] * pl.Lp + (pl.m_of_kx[kx] - pl.m_lo);
    cw[kx] = kx * Cog * CB;
  }
  int64_t roff[NR];
  alignas(64) A tmp[CB * NR * VW];
  for (int64_t t = tb; t < te; ++t) {
    // task = ((nn*G + g)*ncbk + cbk)*nrows_tot + row
    const int64_t row = t % nrows_tot;
    int64_t rest = t / nrows_tot;
    const int64_t cbk = rest % c.ncbk; rest /= c.ncbk;
    const int64_t g = rest % G;
    const int64_t nn = rest / G;
    const int64_t iy0 = (*c.rowlist)[row].first, tnr = (*c.rowlist)[row].second;
    const int64_t nr = tnr == 0 ? 1 : tnr;
    // grad_input row iy reads grad_output rows oy = iy*sh - ph + ky*dh.
    const A* gbase = c.gd + (nn * p.Ho * p.Cout + g * Cog) * rowlen;
    int64_t nrow = 0;
    for (int64_t ky = 0; ky < p.kh; ++ky) {
      const int64_t oy = iy0 * p.sh - p.ph + ky * p.dh;
      if (oy < 0 || oy >= p.Ho) continue;  // never for interior rows
      rows[nrow] = gbase + oy * p.Cout * rowlen;
      roww[nrow] = ky * p.kw * Cog * CB;
      ++nrow;
    }
    for (int i = 0; i < NR; ++i) roff[i] = std::min<int64_t>(i, nr - 1) * rstride;
    const A* w = c.wpk + (g * c.ncbk + cbk) * Cog * p.kh * p.kw * CB;
    const int64_t ci0 = g * Cig + cbk * CB;
    const int64_t nb = std::min<int64_t>(CB, Cig - cbk * CB);
    for (int64_t x0 = 0; x0 < p.W; x0 += VW) {
      int64_t nx;
      if (tnr == 0) {
        micro<A, CB, NV, 1>(rows.data(), roff, roww.data(), nrow, coff.data(), cw.data(), p.kw,
                            Cog, rowlen, w, x0, tmp);
        nx = 1;
      } else {
        micro<A, CB, NV, NR>(rows.data(), roff, roww.data(), nrow, coff.data(), cw.data(), p.kw,
                             Cog, rowlen, w, x0, tmp);
        nx = NR;
      }
      const int64_t nv = std::min<int64_t>(VW, p.W - x0);
      for (int64_t i = 0; i < nr; ++i) {
        T* obase = c.gi.p + (c.n0 + nn) * c.gi.s0 + (iy0 + i) * c.gi.s2 + x0 * c.gi.s3 +
                   ci0 * c.gi.s1;
        if (c.gi.s1 == 1) {  // channels-last: the CB channels are adjacent
          for (int64_t j = 0; j < nv; ++j)
            for (int64_t b = 0; b < nb; ++b)
              obase[j * c.gi.s3 + b] = static_cast<T>(tmp[(b * nx + i) * VW + j]);
        } else {
          for (int64_t b = 0; b < nb; ++b) {
            T* o = obase + b * c.gi.s1;
            const A* s = tmp + (b * nx + i) * VW;
            for (int64_t j = 0; j < nv; ++j) o[j * c.gi.s3] = static_cast<T>(s[j]);
          }
        }
      }
    }
  }
}
CT_DEFINE_WORKERS(gi_tasks, GiCtx)

// grad_weight, for one tap (ky, kx), is a GEMM over positions:
//   gw[ci][co][ky][kx] += sum_{nn, iy, ix} x[nn, ci, iy, ix] * go[nn, co, oy, ox]
//   with oy = iy*sh - ph + ky*dh and go[.., oy, ox] = plane(kx)[oy][ix + mx(kx)],
// a dot product of an x row and a grad_output plane row, both contiguous in ix.
// Register block: 4 input x 3 output channels, 12 vector accumulators.
// A task owns a tile of MT x NT channels for a group of taps and walks the
// (image, row) positions in chunks of R rows, so that the tile's rows stay in
// L2; per chunk it runs every tap and register block of the tile (the blocks
// of the smaller operand innermost, so its rows stay in L1), keeping the
// vector partial sums in a per-task buffer. Every weight element is thus
// summed by one task in an order fixed by the shape alone: deterministic.
constexpr int kGwCI = 4, kGwCO = 3;
template <typename A> struct GwCtx {
  const Problem* p;
  const Planes* pl;
  const A* xc;   // input [nimg][H][Cin][Wr], zero-padded to Wr = round_up(W, L)
  int64_t Wr;
  const A* gd;   // planes [nimg][Ho][Cout][P][Lp]
  A* gw;         // accumulator [Cin][Cog][kh][kw]
  int64_t nimg;
  int64_t MT, NT, R;     // tile channels (multiples of 4 and 3), chunk rows
  int64_t ntg;           // tap groups
  bool ci_inner;         // input-channel blocks innermost
};

template <typename A>
CT_AI void gw_tasks(const GwCtx<A>& c, int64_t tb, int64_t te) {
  using V = typename Vec<A>::V;
  constexpr int L = Vec<A>::L;
  const Problem& p = *c.p;
  const Planes& pl = *c.pl;
  const int64_t Cig = p.cin_g(), Cog = p.cout_g(), K = p.kh * p.kw;
  const int64_t nmt = ceil_div(Cig, c.MT), nnt = ceil_div(Cog, c.NT);
  const int64_t rowlen = pl.P * pl.Lp;
  const int64_t xstep = p.Cin * c.Wr, gstep = p.sh * p.Cout * rowlen;
  const int64_t nfr = c.nimg * p.H;  // (image, row) pairs
  std::vector<A> part;
  for (int64_t t = tb; t < te; ++t) {
    // task = ((g*nmt + mt)*nnt + nt)*ntg + tg
    const int64_t tg = t % c.ntg;
    int64_t rest = t / c.ntg;
    const int64_t nt = rest % nnt; rest /= nnt;
    const int64_t mt = rest % nmt;
    const int64_t g = rest / nmt;
    const int64_t tap0 = tg * K / c.ntg, tap1 = (tg + 1) * K / c.ntg;
    const int64_t ci_t = mt * c.MT, nci = std::min(c.MT, Cig - ci_t);  // tile channels
    const int64_t co_t = nt * c.NT, nco = std::min(c.NT, Cog - co_t);
    const int64_t nbi = ceil_div(nci, kGwCI), nbj = ceil_div(nco, kGwCO);
    constexpr int64_t BLK = int64_t(kGwCI) * kGwCO * L;  // one register block
    part.assign(size_t((tap1 - tap0) * nbi * nbj * BLK), A(0));
    for (int64_t f0 = 0; f0 < nfr; f0 += c.R) {
      const int64_t f1 = std::min(nfr, f0 + c.R);
      for (int64_t tap = tap0; tap < tap1; ++tap) {
        const int64_t ky = tap / p.kw, kx = tap % p.kw;
        // rows iy with 0 <= oy = iy*sh + off < Ho
        const int64_t off = ky * p.dh - p.ph;
        const int64_t iy_lo = std::max<int64_t>(0, floor_div(-off + p.sh - 1, p.sh));
        const int64_t iy_hi = std::min<int64_t>(p.H - 1, floor_div(p.Ho - 1 - off, p.sh));
        if (iy_lo > iy_hi) continue;
        const int64_t gcol = pl.plane_of_kx[kx] * pl.Lp + (pl.m_of_kx[kx] - pl.m_lo);
        for (int64_t bo = 0; bo < (c.ci_inner ? nbj : nbi); ++bo) {
          for (int64_t bn = 0; bn < (c.ci_inner ? nbi : nbj); ++bn) {
            const int64_t bi = c.ci_inner ? bn : bo, bj = c.ci_inner ? bo : bn;
            A* pp = part.data() + (((tap - tap0) * nbi + bi) * nbj + bj) * BLK;
            V acc[kGwCI][kGwCO];
            CT_UNROLL for (int i = 0; i < kGwCI; ++i) {
              CT_UNROLL for (int j = 0; j < kGwCO; ++j)
                acc[i][j] = vload<A>(pp + (i * kGwCO + j) * L);
            }
            // Tail blocks repeat the last channel (results discarded).
            int64_t xo[kGwCI], go[kGwCO];
            CT_UNROLL for (int i = 0; i < kGwCI; ++i)
              xo[i] = (g * Cig + ci_t + std::min<int64_t>(bi * kGwCI + i, nci - 1)) * c.Wr;
            CT_UNROLL for (int j = 0; j < kGwCO; ++j)
              go[j] = (g * Cog + co_t + std::min<int64_t>(bj * kGwCO + j, nco - 1)) * rowlen + gcol;
            for (int64_t nn = f0 / p.H; nn * p.H < f1; ++nn) {
              const int64_t a = std::max(iy_lo, f0 - nn * p.H);
              const int64_t z = std::min(iy_hi, f1 - 1 - nn * p.H);
              if (a > z) continue;
              const A* xr[kGwCI];
              const A* gr[kGwCO];
              const A* xrow = c.xc + (nn * p.H + a) * xstep;
              const A* grow = c.gd + (nn * p.Ho + a * p.sh + off) * p.Cout * rowlen;
              CT_UNROLL for (int i = 0; i < kGwCI; ++i) xr[i] = xrow + xo[i];
              CT_UNROLL for (int j = 0; j < kGwCO; ++j) gr[j] = grow + go[j];
              // Two running offsets (x rows, go rows) instead of seven pointers:
              // narrow rows (one or two vectors) are common here.
              int64_t ox = 0, og = 0;
              for (int64_t iy = a; iy <= z; ++iy, ox += xstep, og += gstep) {
                for (int64_t x = 0; x < c.Wr; x += L) {
                  V xv[kGwCI];
                  CT_UNROLL for (int i = 0; i < kGwCI; ++i) xv[i] = vload<A>(xr[i] + ox + x);
                  CT_UNROLL for (int j = 0; j < kGwCO; ++j) {
                    const V gv = vload<A>(gr[j] + og + x);
                    CT_UNROLL for (int i = 0; i < kGwCI; ++i) acc[i][j] += xv[i] * gv;
                  }
                }
              }
            }
            CT_UNROLL for (int i = 0; i < kGwCI; ++i) {
              CT_UNROLL for (int j = 0; j < kGwCO; ++j)
                vstore<A>(pp + (i * kGwCO + j) * L, acc[i][j]);
            }
          }
        }
      }
    }
    // Lane sums, added to the accumulator (owned by this task).
    for (int64_t tap = tap0; tap < tap1; ++tap)
      for (int64_t i = 0; i < nci; ++i)
        for (int64_t j = 0; j < nco; ++j) {
          const A* pp = part.data() +
                        ((((tap - tap0) * nbi + i / kGwCI) * nbj + j / kGwCO) * BLK) +
                        ((i % kGwCI) * kGwCO + (j % kGwCO)) * L;
          A s = 0;
          for (int l = 0; l < L; ++l) s += pp[l];
          c.gw[((g * Cig + ci_t + i) * Cog + co_t + j) * K + tap] += s;
        }
  }
}
template <typename A> void gw_tasks_base(const GwCtx<A>& c, int64_t b, int64_t e) { gw_tasks<A>(c, b, e); }
#if CT_X86
template <typename A> CT_AVX2 void gw_tasks_avx2(const GwCtx<A>& c, int64_t b, int64_t e) {
  gw_tasks<A>(c, b, e);
}
#endif

// grad_bias[co] = sum over n, oy, ox of go, in a fixed order.
template <typename T, typename A>
void grad_bias(const at::Tensor& grad_output, const Problem& p, at::Tensor& gb) {
  const View4<const T> go(grad_output);
  std::vector<A> res(size_t(p.Cout), A(0));
  if (go.s1 == 1 && p.Cout > 1) {
    // Channels-last: partial sums over fixed blocks of (n, oy) rows, channel
    // innermost (contiguous), then the blocks are added in order.
    const int64_t R = p.N * p.Ho, RB = 8, nblk = ceil_div(R, RB);
    std::vector<A> part(size_t(nblk * p.Cout), A(0));
    parallel_tasks(nblk, std::max<int64_t>(1, 32768 / (RB * p.Wo * p.Cout)), [&](int64_t b, int64_t e) {
      std::vector<A> rowsum(size_t(p.Cout));
      for (int64_t blk = b; blk < e; ++blk) {
        A* d = part.data() + blk * p.Cout;
        for (int64_t r = blk * RB; r < std::min(R, (blk + 1) * RB); ++r) {
          const int64_t n = r / p.Ho, oy = r % p.Ho;
          std::fill(rowsum.begin(), rowsum.end(), A(0));
          for (int64_t ox = 0; ox < p.Wo; ++ox) {
            const T* s = go.p + n * go.s0 + oy * go.s2 + ox * go.s3;
            for (int64_t co = 0; co < p.Cout; ++co) rowsum[co] += static_cast<A>(s[co]);
          }
          for (int64_t co = 0; co < p.Cout; ++co) d[co] += rowsum[co];
        }
      }
    });
    for (int64_t blk = 0; blk < nblk; ++blk)
      for (int64_t co = 0; co < p.Cout; ++co) res[co] += part[blk * p.Cout + co];
  } else {
    parallel_tasks(p.Cout, std::max<int64_t>(1, 32768 / (p.N * p.Ho * p.Wo)), [&](int64_t b, int64_t e) {
      for (int64_t co = b; co < e; ++co) {
        A total = 0;
        for (int64_t n = 0; n < p.N; ++n) {
          for (int64_t oy = 0; oy < p.Ho; ++oy) {
            const T* s = go.p + n * go.s0 + co * go.s1 + oy * go.s2;
            A part[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // 8 independent partials
            int64_t ox = 0;
            if (go.s3 == 1) {
              for (; ox + 8 <= p.Wo; ox += 8)
                for (int l = 0; l < 8; ++l) part[l] += static_cast<A>(s[ox + l]);
            }
            for (; ox < p.Wo; ++ox) part[ox & 7] += static_cast<A>(s[ox * go.s3]);
            total += ((part[0] + part[1]) + (part[2] + part[3])) +
                     ((part[4] + part[5]) + (part[6] + part[7]));
          }
        }
        res[co] = total;
      }
    });
  }
  T* o = gb.data_ptr<T>();
  for (int64_t co = 0; co < p.Cout; ++co) o[co] = static_cast<T>(res[co]);
}

template <typename T, int CB, int NV, int NR>
void backward_impl(const Problem& p, const at::Tensor& grad_output, const at::Tensor& input,
                   const at::Tensor& weight, bool need_gi, bool need_gw, at::Tensor& gi,
                   at::Tensor& gw) {
  using A = acc_t<T>;
  constexpr int L = Vec<A>::L;
  constexpr int64_t VW = int64_t(NV) * L;
  const int64_t G = p.groups, Cig = p.cin_g(), Cog = p.cout_g(), K = p.kh * p.kw;
  const int64_t Wr = round_up(p.W, L);
  const Planes pl = make_planes(p, std::max<int64_t>(need_gi ? round_up(p.W, VW) : 0, Wr));

  const int64_t ncbk = ceil_div(Cig, CB);
  std::vector<A> wpk;
  if (need_gi) wpk = pack_weights_gi<T, A>(weight, p, CB);
  std::vector<A> gwacc;
  if (need_gw) gwacc.assign(size_t(p.Cin * Cog * K), A(0));

  const int64_t per_img = (p.Cout * p.Ho * pl.P * pl.Lp + (need_gw ? p.Cin * p.H * Wr : 0)) *
                          int64_t(sizeof(A));
  const int64_t nchunk = images_per_chunk(p.N, per_img);
  const int64_t nmax = std::min(nchunk, p.N);
  std::vector<A> gd(size_t(nmax * p.Cout * p.Ho * pl.P * pl.Lp));
  std::vector<A> xc(need_gw ? size_t(nmax * p.Cin * p.H * Wr) : 0);
  const View4<const T> gov(grad_output), xin(input);

  // grad_input work rows: interior rows NR at a time, boundary rows alone.
  std::vector<std::pair<int64_t, int64_t>> girows;
  {
    int64_t ia, ib;
    gi_interior(p, ia, ib);
    if (NR == 1) { ia = p.H; ib = -1; }
    for (int64_t iy = 0; iy < p.H;) {
      const int64_t nr = (iy >= ia && iy <= ib) ? std::min<int64_t>(NR, ib + 1 - iy) : 0;
      girows.emplace_back(iy, nr);
      iy += std::max<int64_t>(nr, 1);
    }
  }
  GiCtx<T, A> gic{&p, &pl, &girows, gd.data(), wpk.data(), ncbk,
                  View4<T>(need_gi ? gi : grad_output), 0};
  // grad_weight tiles: up to 32 x 48 channels; chunk rows R so that a tile's
  // x and grad_output rows take about 128 KiB (L2). Tap groups only add tasks
  // (load balance); the summation order does not depend on them.
  GwCtx<A> gwc{&p, &pl, xc.data(), Wr, gd.data(), gwacc.data(), 0, 0, 0, 0, 1, true};
  gwc.MT = std::min<int64_t>(round_up(Cig, kGwCI), 32);
  gwc.NT = std::min<int64_t>(round_up(Cog, kGwCO), 48);
  {
    const int64_t xrow = gwc.MT * Wr, grow = gwc.NT * p.sh * pl.P * pl.Lp;  // per input row
    gwc.ci_inner = xrow <= grow;
    gwc.R = std::max<int64_t>(1, (128 << 10) / (int64_t(sizeof(A)) * (xrow + grow)));
  }
  const int64_t gw_tiles = G * ceil_div(Cig, gwc.MT) * ceil_div(Cog, gwc.NT);
  while (gwc.ntg < K && gw_tiles * gwc.ntg < 8 * int64_t(at::get_num_threads())) ++gwc.ntg;
  auto giw = &gi_tasks_base<T, A, CB, NV, NR>;
  auto gww = &gw_tasks_base<A>;
#if CT_X86
  if (cpu_has_avx2()) { giw = &gi_tasks_avx2<T, A, CB, NV, NR>; gww = &gw_tasks_avx2<A>; }
#endif
  for (int64_t n0 = 0; n0 < p.N; n0 += nchunk) {
    const int64_t nimg = std::min(nchunk, p.N - n0);
    build_planes<T, A>(gov, p, pl, n0, nimg, gd.data());
    if (need_gi) {
      gic.n0 = n0;
      const int64_t ntask = nimg * G * ncbk * int64_t(girows.size());
      parallel_tasks(ntask, 1, [&](int64_t b, int64_t e) { giw(gic, b, e); });
    }
    if (need_gw) {
      pad_rows<T, A>(xin, n0, nimg, p.Cin, p.H, p.W, xc.data(), Wr, 0);
      gwc.nimg = nimg;
      parallel_tasks(gw_tiles * gwc.ntg, 1, [&](int64_t b, int64_t e) { gww(gwc, b, e); });
    }
  }
  if (need_gw) {
    const View4<T> o(gw);
    parallel_tasks(p.Cin * Cog, std::max<int64_t>(1, 16384 / K), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const int64_t ci = i / Cog, co = i % Cog;
        for (int64_t ky = 0; ky < p.kh; ++ky)
          for (int64_t kx = 0; kx < p.kw; ++kx)
            o.p[ci * o.s0 + co * o.s1 + ky * o.s2 + kx * o.s3] =
                static_cast<T>(gwacc[i * K + ky * p.kw + kx]);
      }
    });
  }
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> backward_cpu(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef output_padding,
    int64_t groups, at::IntArrayRef dilation, std::array<bool, 3> output_mask) {
  const Problem p = make_problem(input, weight, std::nullopt, stride, padding, output_padding,
                                 groups, dilation);
  check_grad_output(grad_output, input, p);
  at::Tensor gi = output_mask[0]
                      ? at::empty(input.sizes(), input.options().memory_format(
                                                     suggest_memory_format(input, weight)))
                      : not_requested(input);
  at::Tensor gw = output_mask[1]
                      ? at::empty(weight.sizes(), weight.options().memory_format(
                                                      weight.suggest_memory_format()))
                      : not_requested(input);
  at::Tensor gb = output_mask[2] ? at::empty({p.Cout}, input.options()) : not_requested(input);
  const bool need_gi = output_mask[0] && gi.numel() > 0;
  const bool need_gw = output_mask[1] && gw.numel() > 0;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, input.scalar_type(), "convt2d_backward_cpu", [&] {
    using A = acc_t<scalar_t>;
    if (output_mask[2]) {
      if (p.N == 0) gb.zero_();
      else grad_bias<scalar_t, A>(grad_output, p, gb);
    }
    if (p.N == 0) {
      if (need_gw) gw.zero_();
      return;
    }
    if (!need_gi && !need_gw) return;
    int64_t ia, ib;
    gi_interior(p, ia, ib);
    const int64_t inner = std::max<int64_t>(0, ib - ia + 1);
    const std::vector<RowShape> segs{{p.W, inner, p.H - inner, 1.0}};
    with_cfg(pick_cfg(p.cin_g(), segs, Vec<A>::L), [&](auto cb, auto nv, auto nr) {
      backward_impl<scalar_t, decltype(cb)::value, decltype(nv)::value, decltype(nr)::value>(
          p, grad_output, input, weight, need_gi, need_gw, gi, gw);
    });
  });
  return {gi, gw, gb};
}

}  // namespace
}  // namespace convt2d

TORCH_LIBRARY_IMPL(convt2d, CPU, m) {
  m.impl("forward", &convt2d::forward_cpu);
  m.impl("backward", &convt2d::backward_cpu);
}
