// oneDNN convolutions (forward, backward-data, backward-weights) as XLA FFI handlers.
//
// Built on first use by fedjax_drift/models/onednn.py (g++, into the user cache) against the
// oneDNN of the `onednn-cpu-gomp` wheels and the FFI headers jaxlib ships.
//
// Layouts are JAX's: activations NHWC, kernels HWIO, float32. Any leading axes before these four
// are batch axes that vmap added (jax.ffi.ffi_call(..., vmap_method='expand_dims')): each
// operand's leading axes either equal the result's or are 1 (broadcast), and the handler runs
// one convolution per leading index, so vmapped clients each convolve with their own kernel.
//
// Attributes: stride_h, stride_w and the explicit zero padding pad_top, pad_bottom, pad_left,
// pad_right (lax.conv_general_dilated's, resolved from SAME/VALID on the Python side).
//
// Primitives are created once per shape and kept (creating a primitive descriptor costs far more
// than a small convolution). Activations stay NHWC, so they are read and written in place; the
// kernel is given to oneDNN in the format it chooses (`any`) and reordered from/to HWIO on each
// call, which is cheap next to the convolution. The scratchpad is user-managed and
// thread-local; calls from several XLA threads run one after another (see Run).
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "oneapi/dnnl/dnnl.hpp"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;
using dnnl::memory;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

namespace {

enum Kind { kForward = 0, kBackwardData = 1, kBackwardWeights = 2 };

// The convolution one call computes, batch axes excluded.
struct Geometry {
  int64_t n, h, w, c;      // input NHWC
  int64_t kh, kw, f;       // kernel HWIO (C = c)
  int64_t oh, ow;          // output spatial size
  int64_t sh, sw, pt, pb, pl, pr;

  std::string key(Kind kind) const {
    std::string s = std::to_string(kind);
    for (int64_t v : {n, h, w, c, kh, kw, f, oh, ow, sh, sw, pt, pb, pl, pr}) {
      s += ',' + std::to_string(v);
    }
    return s;
  }
  memory::desc src() const { return memory::desc({n, c, h, w}, dt::f32, tag::nhwc); }
  memory::desc dst() const { return memory::desc({n, f, oh, ow}, dt::f32, tag::nhwc); }
  memory::desc hwio() const { return memory::desc({f, c, kh, kw}, dt::f32, tag::hwio); }
  memory::desc any_weights() const { return memory::desc({f, c, kh, kw}, dt::f32, tag::any); }
};

dnnl::engine& Engine() {
  static dnnl::engine* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

// One cached convolution: the primitive, the kernel format it wants and, when that is not HWIO,
// the reorder between it and HWIO (user -> primitive for forward and backward-data, primitive
// -> user for backward-weights).
struct Plan {
  dnnl::primitive conv;
  memory::desc weights;      // the primitive's (diff_)weights format
  bool reorder_weights;
  dnnl::reorder reorder;
  memory::desc scratchpad;
};

dnnl::primitive_attr UserScratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

dnnl::convolution_forward::primitive_desc ForwardDesc(const Geometry& g, dnnl::prop_kind prop) {
  return dnnl::convolution_forward::primitive_desc(
      Engine(), prop, dnnl::algorithm::convolution_direct, g.src(), g.any_weights(), g.dst(),
      {g.sh, g.sw}, {g.pt, g.pl}, {g.pb, g.pr}, UserScratchpad());
}

std::shared_ptr<Plan> MakePlan(const Geometry& g, Kind kind) {
  auto plan = std::make_shared<Plan>();
  const memory::desc hwio = g.hwio();
  if (kind == kForward) {
    // forward_training, not inference: the same kernel choice as the backward passes' hint.
    auto pd = ForwardDesc(g, dnnl::prop_kind::forward_training);
    plan->conv = dnnl::convolution_forward(pd);
    plan->weights = pd.weights_desc();
    plan->scratchpad = pd.scratchpad_desc();
  } else {
    auto hint = ForwardDesc(g, dnnl::prop_kind::forward_training);
    if (kind == kBackwardData) {
      auto pd = dnnl::convolution_backward_data::primitive_desc(
          Engine(), dnnl::algorithm::convolution_direct, g.src(), g.any_weights(), g.dst(),
          {g.sh, g.sw}, {g.pt, g.pl}, {g.pb, g.pr}, hint, UserScratchpad());
      plan->conv = dnnl::convolution_backward_data(pd);
      plan->weights = pd.weights_desc();
      plan->scratchpad = pd.scratchpad_desc();
    } else {
      auto pd = dnnl::convolution_backward_weights::primitive_desc(
          Engine(), dnnl::algorithm::convolution_direct, g.src(), g.any_weights(), g.dst(),
          {g.sh, g.sw}, {g.pt, g.pl}, {g.pb, g.pr}, hint, UserScratchpad());
      plan->conv = dnnl::convolution_backward_weights(pd);
      plan->weights = pd.diff_weights_desc();
      plan->scratchpad = pd.scratchpad_desc();
    }
  }
  plan->reorder_weights = plan->weights != hwio;
  if (plan->reorder_weights) {
    plan->reorder = kind == kBackwardWeights
                        ? dnnl::reorder(dnnl::reorder::primitive_desc(
                              Engine(), plan->weights, Engine(), hwio))
                        : dnnl::reorder(dnnl::reorder::primitive_desc(
                              Engine(), hwio, Engine(), plan->weights));
  }
  return plan;
}

std::shared_ptr<Plan> GetPlan(const Geometry& g, Kind kind) {
  static std::mutex mu;
  static auto* plans = new std::unordered_map<std::string, std::shared_ptr<Plan>>();
  const std::string key = g.key(kind);
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = plans->find(key);
    if (it != plans->end()) return it->second;
  }
  auto plan = MakePlan(g, kind);  // outside the lock: primitive creation is slow
  std::lock_guard<std::mutex> lock(mu);
  return plans->emplace(key, plan).first->second;
}

// A growable, 64-byte aligned, thread-local buffer (scratchpad, reordered kernel).
void* Scratch(std::vector<char>& buf, size_t bytes) {
  if (buf.size() < bytes + 64) buf.resize(bytes + 64);
  uintptr_t p = reinterpret_cast<uintptr_t>(buf.data());
  return reinterpret_cast<void*>((p + 63) & ~uintptr_t(63));
}

// Runs plan on one batch element: a, b are the two inputs, out the result, all in JAX layouts.
void RunOne(const Plan& plan, const Geometry& g, Kind kind, float* a, float* b, float* out) {
  thread_local dnnl::stream stream(Engine());
  thread_local std::vector<char> scratch_buf, weights_buf;
  dnnl::engine& eng = Engine();
  memory scratch(plan.scratchpad, eng, Scratch(scratch_buf, plan.scratchpad.get_size()));
  // The kernel in the primitive's format: the user's HWIO memory itself, or a reordered copy.
  float* user_weights = kind == kBackwardWeights ? out : b;
  memory hwio(g.hwio(), eng, user_weights);
  memory weights = plan.reorder_weights
                       ? memory(plan.weights, eng, Scratch(weights_buf, plan.weights.get_size()))
                       : hwio;
  if (kind != kBackwardWeights && plan.reorder_weights) {
    plan.reorder.execute(stream, hwio, weights);
  }
  if (kind == kForward) {  // a = x, b = kernel, out = y
    plan.conv.execute(stream, {{DNNL_ARG_SRC, memory(g.src(), eng, a)},
                               {DNNL_ARG_WEIGHTS, weights},
                               {DNNL_ARG_DST, memory(g.dst(), eng, out)},
                               {DNNL_ARG_SCRATCHPAD, scratch}});
  } else if (kind == kBackwardData) {  // a = dy, b = kernel, out = dx
    plan.conv.execute(stream, {{DNNL_ARG_DIFF_DST, memory(g.dst(), eng, a)},
                               {DNNL_ARG_WEIGHTS, weights},
                               {DNNL_ARG_DIFF_SRC, memory(g.src(), eng, out)},
                               {DNNL_ARG_SCRATCHPAD, scratch}});
  } else {  // a = x, b = dy, out = dkernel
    plan.conv.execute(stream, {{DNNL_ARG_SRC, memory(g.src(), eng, a)},
                               {DNNL_ARG_DIFF_DST, memory(g.dst(), eng, b)},
                               {DNNL_ARG_DIFF_WEIGHTS, weights},
                               {DNNL_ARG_SCRATCHPAD, scratch}});
    if (plan.reorder_weights) plan.reorder.execute(stream, weights, hwio);
  }
  stream.wait();
}

// Element offset of operand `dims` (leading axes broadcast against `lead`) for batch index i.
int64_t BroadcastOffset(const std::vector<int64_t>& lead, ffi::Span<const int64_t> dims,
                        int64_t i, int64_t inner) {
  const size_t n_lead = dims.size() - 4, skip = lead.size() - n_lead;
  int64_t offset = 0, stride = inner;
  for (size_t ax = lead.size(); ax-- > 0;) {
    const int64_t idx = i % lead[ax];
    i /= lead[ax];
    if (ax < skip) continue;  // an axis this operand lacks: broadcast
    const int64_t size = dims[ax - skip];
    offset += (size == 1 ? 0 : idx) * stride;
    stride *= size;
  }
  return offset;
}

int64_t Inner(ffi::Span<const int64_t> dims) {
  const size_t r = dims.size();
  return dims[r - 4] * dims[r - 3] * dims[r - 2] * dims[r - 1];
}

ffi::Error Run(Kind kind, ffi::Buffer<ffi::F32> a, ffi::Buffer<ffi::F32> b,
               ffi::Result<ffi::Buffer<ffi::F32>> out, int64_t sh, int64_t sw, int64_t pt,
               int64_t pb, int64_t pl, int64_t pr) {
  auto da = a.dimensions(), db = b.dimensions(), dout = out->dimensions();
  if (da.size() < 4 || db.size() < 4 || dout.size() < 4 || da.size() > dout.size() ||
      db.size() > dout.size()) {
    return ffi::Error::InvalidArgument("onednn conv: operands must be rank >= 4");
  }
  const size_t r = dout.size();
  std::vector<int64_t> lead(dout.begin(), dout.end() - 4);
  auto tail = [](ffi::Span<const int64_t> d, int k) { return d[d.size() - 4 + k]; };
  Geometry g{};
  g.sh = sh; g.sw = sw; g.pt = pt; g.pb = pb; g.pl = pl; g.pr = pr;
  // a is x (forward, backward-weights) or dy (backward-data); b is the kernel or dy.
  if (kind == kForward) {
    g.n = tail(da, 0); g.h = tail(da, 1); g.w = tail(da, 2); g.c = tail(da, 3);
    g.kh = tail(db, 0); g.kw = tail(db, 1); g.f = tail(db, 3);
    g.oh = dout[r - 3]; g.ow = dout[r - 2];
  } else if (kind == kBackwardData) {
    g.n = dout[r - 4]; g.h = dout[r - 3]; g.w = dout[r - 2]; g.c = dout[r - 1];
    g.kh = tail(db, 0); g.kw = tail(db, 1); g.f = tail(db, 3);
    g.oh = tail(da, 1); g.ow = tail(da, 2);
  } else {
    g.n = tail(da, 0); g.h = tail(da, 1); g.w = tail(da, 2); g.c = tail(da, 3);
    g.kh = dout[r - 4]; g.kw = dout[r - 3]; g.f = dout[r - 1];
    g.oh = tail(db, 1); g.ow = tail(db, 2);
  }
  for (size_t ax = 0; ax < lead.size(); ++ax) {  // each operand's leading axis: lead's or 1
    for (auto d : {da, db}) {
      const size_t skip = lead.size() - (d.size() - 4);
      if (ax >= skip && d[ax - skip] != 1 && d[ax - skip] != lead[ax]) {
        return ffi::Error::InvalidArgument("onednn conv: batch axes do not broadcast");
      }
    }
  }
  int64_t groups = 1;
  for (int64_t v : lead) groups *= v;
  const int64_t inner_out = Inner(dout);
  try {
    auto plan = GetPlan(g, kind);
    // One convolution at a time in the process: each already spreads over every core with
    // OpenMP, and XLA may start independent ones (backward-data beside backward-weights) on
    // two of its threads at once, which would put two OpenMP teams on the same cores.
    static std::mutex exec_mu;
    std::lock_guard<std::mutex> lock(exec_mu);
    for (int64_t i = 0; i < groups; ++i) {
      RunOne(*plan, g, kind, a.typed_data() + BroadcastOffset(lead, da, i, Inner(da)),
             b.typed_data() + BroadcastOffset(lead, db, i, Inner(db)),
             out->typed_data() + i * inner_out);
    }
  } catch (const dnnl::error& e) {
    return ffi::Error::Internal(std::string("oneDNN convolution failed: ") + e.what());
  }
  return ffi::Error::Success();
}

}  // namespace

#define CONV_HANDLER(Name, kind)                                                          \
  static ffi::Error Name##Impl(ffi::Buffer<ffi::F32> a, ffi::Buffer<ffi::F32> b,                \
                        ffi::Result<ffi::Buffer<ffi::F32>> out, int64_t sh, int64_t sw,   \
                        int64_t pt, int64_t pb, int64_t pl, int64_t pr) {                 \
    return Run(kind, a, b, out, sh, sw, pt, pb, pl, pr);                                 \
  }                                                                                       \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(Name, Name##Impl,                                         \
                                ffi::Ffi::Bind()                                          \
                                    .Arg<ffi::Buffer<ffi::F32>>()                         \
                                    .Arg<ffi::Buffer<ffi::F32>>()                         \
                                    .Ret<ffi::Buffer<ffi::F32>>()                         \
                                    .Attr<int64_t>("stride_h")                            \
                                    .Attr<int64_t>("stride_w")                            \
                                    .Attr<int64_t>("pad_top")                             \
                                    .Attr<int64_t>("pad_bottom")                          \
                                    .Attr<int64_t>("pad_left")                            \
                                    .Attr<int64_t>("pad_right"));

CONV_HANDLER(FedjaxDriftOnednnConvForward, kForward)
CONV_HANDLER(FedjaxDriftOnednnConvBackwardData, kBackwardData)
CONV_HANDLER(FedjaxDriftOnednnConvBackwardWeights, kBackwardWeights)

// The oneDNN version this library was built against, for the run header and tests.
extern "C" int FedjaxDriftOnednnVersion() {
  const dnnl_version_t* v = dnnl_version();
  return v->major * 10000 + v->minor * 100 + v->patch;
}
