// TelemetryGate (node/telemetry_gate.h): detach() waits for a callback that
// is still reading the object, so sb-node may destroy its data plane right
// after detach_telemetry() while dpdk-telemetry.py clients are asking.
#include <catch2/catch.hpp>
#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "node/telemetry_gate.h"

using namespace std::chrono_literals;

namespace {
struct Obj {
  int value = 7;
};
}  // namespace

TEST_CASE("TelemetryGate: callbacks see the attached object, then nullptr after detach") {
  sb::node::TelemetryGate<Obj> g;
  CHECK(g.with([](const Obj* p) { return p == nullptr; }));
  Obj o;
  g.attach(&o);
  CHECK(g.with([](const Obj* p) { return p ? p->value : -1; }) == 7);
  g.detach();
  CHECK(g.with([](const Obj* p) { return p == nullptr; }));
}

TEST_CASE("TelemetryGate: detach() returns only after a callback using the object has finished") {
  sb::node::TelemetryGate<Obj> g;
  auto o = std::make_unique<Obj>();
  g.attach(o.get());
  std::atomic<bool> inside{false}, release{false}, detached{false};
  std::atomic<int> seen{0};
  std::thread reader([&] {
    g.with([&](const Obj* p) {
      inside.store(true);
      while (!release.load()) std::this_thread::sleep_for(1ms);
      seen.store(p ? p->value : -1);  // still valid: detach() has not returned
    });
  });
  while (!inside.load()) std::this_thread::sleep_for(1ms);
  std::thread owner([&] {
    g.detach();
    detached.store(true);
    o.reset();  // what sb-node does next: the data plane goes
  });
  std::this_thread::sleep_for(50ms);
  CHECK_FALSE(detached.load());  // a plain atomic pointer would let it through here
  release.store(true);
  reader.join();
  owner.join();
  CHECK(detached.load());
  CHECK(seen.load() == 7);
  CHECK(g.with([](const Obj* p) { return p == nullptr; }));
}
