// node/telemetry_gate.h: hands a pointer to callbacks that run on threads
// we do not own (DPDK telemetry's per-connection threads call sb-node's
// /sb/counters and /sb/ports with no context argument), and lets the owner
// take it back before the object goes away.
//
// CONTRACT
//   attach(p)   callbacks from now on see p.
//   detach()    callbacks from now on see nullptr, and detach() returns only
//               after every callback that was already using the old pointer
//               has finished: the caller may destroy the object right after.
//   with(f)     calls f(p) with the current pointer (possibly nullptr), the
//               object kept alive for the duration of f.
//   An atomic pointer alone is not enough: a callback that loaded p just
//   before detach() would go on reading it while the owner destroys it
//   (sb-node's shutdown: detach, then DataPlane::shutdown()).
//
// THREAD SAFETY: any number of threads in with() at once (shared lock);
// attach/detach from any thread, exclusive. f must not call attach/detach.
// Cost: one uncontended shared-lock round trip per callback (a telemetry
// request, not the packet path).
#pragma once

#include <mutex>
#include <shared_mutex>

namespace sb::node {

template <typename T>
class TelemetryGate {
 public:
  void attach(const T* p) {
    std::unique_lock lk(mu_);
    p_ = p;
  }
  void detach() {
    std::unique_lock lk(mu_);  // waits for callbacks inside with()
    p_ = nullptr;
  }
  template <typename F>
  auto with(F&& f) const {
    std::shared_lock lk(mu_);
    return f(p_);
  }

 private:
  mutable std::shared_mutex mu_;
  const T* p_ = nullptr;
};

}  // namespace sb::node
