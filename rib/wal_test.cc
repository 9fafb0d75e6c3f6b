#include "rib/wal.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <vector>
#include <algorithm>

#include "core/checksum.h"

using namespace sb;
using namespace sb::rib;
namespace fs = std::filesystem;

namespace {
struct TmpDir {
  std::string path;
  TmpDir() {
    static int n = 0;
    path = fs::temp_directory_path() / ("sbwal." + std::to_string(::getpid()) + "." + std::to_string(n++));
    fs::remove_all(path);
  }
  ~TmpDir() { fs::remove_all(path); }
};

WalRecord put(uint32_t i, uint32_t node) {
  WalRecord r;
  r.type = WalRecord::kPut;
  r.key = FlowKey::five_tuple(i, i * 7, 1, 2, 17);
  r.node = node;
  r.teid_dl = i + 100;
  r.request_id = i + 1;
  return r;
}

using Model = std::map<uint32_t, uint32_t>;  // src_ip -> node
Model recover_model(const WalOptions& o, WalStats* st = nullptr) {
  Model m;
  auto w = Wal::open(o).value();
  REQUIRE(w->recover([&](const WalRecord& r) {
    if (r.type == WalRecord::kPut) m[r.key.src_ip()] = r.node;
    else m.erase(r.key.src_ip());
  }).ok());
  if (st) *st = w->stats();
  return m;
}
}  // namespace

TEST_CASE("wal: group commit and recovery cut a torn tail") {
  TmpDir d;
  WalOptions o{d.path, FsyncPolicy::kBatch, 10};
  Model model;
  {
    auto w = Wal::open(o).value();
    REQUIRE(w->recover([](const WalRecord&) {}).ok());
    for (uint32_t i = 0; i < 1000; ++i) {
      w->append(put(i, i % 4));
      model[i] = i % 4;
      if (i % 100 == 99) REQUIRE(w->commit().ok());
    }
    WalRecord del = put(5, 0);
    del.type = WalRecord::kDel;
    w->append(del);
    model.erase(5);
    REQUIRE(w->commit().ok());
    CHECK(w->stats().syncs == 11);
  }
  CHECK(recover_model(o) == model);
  // A torn record at the end (a crash mid-write) is cut off.
  std::string seg;
  for (auto& e : fs::directory_iterator(d.path + "/wal")) seg = std::max(seg, e.path().string());
  const auto size = fs::file_size(seg);
  std::string extra;
  Wal::encode(put(5000, 1), &extra);
  {
    std::ofstream f(seg, std::ios::app | std::ios::binary);
    f.write(extra.data(), std::streamsize(extra.size() - 3));
  }
  WalStats st;
  CHECK(recover_model(o, &st) == model);
  CHECK(st.truncated_tail_bytes == extra.size() - 3);
  CHECK(fs::file_size(seg) == size);
}

TEST_CASE("wal: snapshot truncates the log and recovery is snapshot plus tail") {
  TmpDir d;
  WalOptions o{d.path, FsyncPolicy::kNone, 10};
  Model model;
  {
    auto w = Wal::open(o).value();
    REQUIRE(w->recover([](const WalRecord&) {}).ok());
    for (uint32_t i = 0; i < 500; ++i) { w->append(put(i, 1)); model[i] = 1; }
    REQUIRE(w->commit().ok());
    REQUIRE(w->snapshot([&](const std::function<void(const WalRecord&)>& emit) {
      for (auto& [k, v] : model) emit(put(k, v));
    }).ok());
    CHECK(w->records_since_snapshot() == 0);
    for (uint32_t i = 500; i < 600; ++i) { w->append(put(i, 2)); model[i] = 2; }
    REQUIRE(w->commit().ok());
  }
  size_t segs = 0;
  for (auto& e : fs::directory_iterator(d.path + "/wal")) { (void)e; ++segs; }
  CHECK(segs == 1);  // the pre-snapshot segment is gone
  CHECK(recover_model(o) == model);
}

TEST_CASE("wal: corruption before the last segment refuses to start") {
  TmpDir d;
  WalOptions o{d.path, FsyncPolicy::kNone, 10};
  {
    auto w = Wal::open(o).value();
    REQUIRE(w->recover([](const WalRecord&) {}).ok());
    for (uint32_t i = 0; i < 10; ++i) w->append(put(i, 1));
    REQUIRE(w->commit().ok());
  }
  { (void)recover_model(o); }  // opens a second segment
  {
    auto w = Wal::open(o).value();
    REQUIRE(w->recover([](const WalRecord&) {}).ok());
    w->append(put(77, 1));
    REQUIRE(w->commit().ok());
  }
  std::vector<std::string> segs;
  for (auto& e : fs::directory_iterator(d.path + "/wal")) segs.push_back(e.path());
  std::sort(segs.begin(), segs.end());
  REQUIRE(segs.size() >= 2);
  {
    std::fstream f(segs[0], std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(20);
    f.put('X');
  }
  auto w = Wal::open(o).value();
  CHECK(w->recover([](const WalRecord&) {}).code() == StatusCode::kCorrupt);
}

TEST_CASE("wal: the UNDO flag survives recovery, a verified record of an unknown kind is refused, not cut off", "[wal]") {
  TmpDir d;
  WalOptions o{d.path, FsyncPolicy::kBatch, 10};
  {
    auto w = Wal::open(o).value();
    REQUIRE(w->recover([](const WalRecord&) {}).ok());
    w->append(put(1, 2));
    WalRecord undo = put(1, 0);
    undo.type = WalRecord::kDel;
    undo.undo = true;  // compensates request 2 (put(1) above)
    w->append(undo);
    w->append(put(3, 1));
    REQUIRE(w->commit().ok());
  }
  std::vector<WalRecord> got;
  {
    auto w = Wal::open(o).value();
    REQUIRE(w->recover([&](const WalRecord& r) { got.push_back(r); }).ok());
  }
  REQUIRE(got.size() == 3);
  CHECK_FALSE(got[0].undo);
  CHECK(got[1].undo);
  CHECK(got[1].type == WalRecord::kDel);
  CHECK(got[1].request_id == 2);
  CHECK_FALSE(got[2].undo);
  // A record whose checksum verifies was written whole: one with a flag bit
  // or a type this version does not know comes from a newer version (or a
  // bug), not from a torn write. Cutting it off as a torn tail would drop
  // an acknowledged op silently: recovery refuses, the file stays as it is.
  std::string seg;
  for (auto& e : fs::directory_iterator(d.path + "/wal")) seg = std::max(seg, e.path().string());
  auto append_verified = [&](int byte, char value) {
    std::string extra;
    Wal::encode(put(9, 1), &extra);
    extra[size_t(byte)] = value;  // and a valid checksum, so only the header check can refuse it
    const uint64_t sum = checksum64(extra.data(), extra.size() - 8);
    std::memcpy(&extra[extra.size() - 8], &sum, 8);
    std::ofstream f(seg, std::ios::app | std::ios::binary);
    f.write(extra.data(), std::streamsize(extra.size()));
  };
  const auto size = fs::file_size(seg);
  SECTION("an unknown flag bit") { append_verified(5, 2); }
  SECTION("an unknown type") { append_verified(4, 9); }
  SECTION("nonzero padding") { append_verified(7, 1); }
  const auto grown = fs::file_size(seg);
  REQUIRE(grown > size);
  auto w = Wal::open(o).value();
  const Status st = w->recover([](const WalRecord&) {});
  INFO(st.to_string());
  CHECK(st.code() == StatusCode::kCorrupt);
  CHECK(st.message().find("newer version") != std::string::npos);
  CHECK(st.message().find(fs::path(seg).filename().string()) != std::string::npos);
  CHECK(st.message().find("offset " + std::to_string(size)) != std::string::npos);
  CHECK(fs::file_size(seg) == grown);
}

namespace {
// A new log in o.dir holding records 0..n-1 (node 1), committed; model too.
std::unique_ptr<Wal> log_with(const WalOptions& o, uint32_t n, Model* model) {
  auto w = Wal::open(o).value();
  REQUIRE(w->recover([](const WalRecord&) {}).ok());
  for (uint32_t i = 0; i < n; ++i) { w->append(put(i, 1)); (*model)[i] = 1; }
  REQUIRE(w->commit().ok());
  return w;
}

// A data dir with a snapshot at segment 2 (records 0..99) and 5 records after it.
void make_snapshotted_log(const WalOptions& o) {
  Model m;
  auto w = log_with(o, 100, &m);
  REQUIRE(w->snapshot([&](const std::function<void(const WalRecord&)>& emit) {
    for (auto& [k, v] : m) emit(put(k, v));
  }).ok());
  for (uint32_t i = 100; i < 105; ++i) w->append(put(i, 2));
  REQUIRE(w->commit().ok());
}

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> v;
  for (auto& e : fs::directory_iterator(dir)) v.push_back(e.path());
  std::sort(v.begin(), v.end());
  return v;
}

StatusCode recover_code(const WalOptions& o) {
  auto w = Wal::open(o).value();
  return w->recover([](const WalRecord&) {}).code();
}

}  // namespace

TEST_CASE("wal: a log that cannot be complete refuses to start instead of losing sessions") {
  TmpDir d;
  WalOptions o{d.path, FsyncPolicy::kNone, 10};
  make_snapshotted_log(o);
  REQUIRE(recover_model(o).size() == 105);

  SECTION("the only snapshot does not verify") {
    const auto snaps = files_in(d.path + "/snap");
    REQUIRE(snaps.size() == 1);
    std::fstream f(snaps[0], std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    f.put('X');
    f.close();
    CHECK(recover_code(o) == StatusCode::kCorrupt);
  }
  SECTION("the segment that starts at the snapshot is missing") {
    const auto segs = files_in(d.path + "/wal");
    REQUIRE(segs.size() >= 2);
    fs::remove(segs[0]);
    CHECK(recover_code(o) == StatusCode::kCorrupt);
  }
  SECTION("a gap in the segment numbers") {
    { (void)recover_model(o); }  // one more (empty) segment after the replayed ones
    const auto segs = files_in(d.path + "/wal");
    REQUIRE(segs.size() >= 3);
    fs::remove(segs[1]);
    CHECK(recover_code(o) == StatusCode::kCorrupt);
  }
  SECTION("no snapshot and the log does not start at segment 1") {
    for (const auto& s : files_in(d.path + "/snap")) fs::remove(s);
    CHECK(recover_code(o) == StatusCode::kCorrupt);
  }
  SECTION("every segment gone") {
    for (const auto& s : files_in(d.path + "/wal")) fs::remove(s);
    CHECK(recover_code(o) == StatusCode::kCorrupt);
  }
}

TEST_CASE("wal: an older snapshot is the fallback while the segments after it are still there") {
  TmpDir d;
  WalOptions o{d.path, FsyncPolicy::kNone, 10};
  make_snapshotted_log(o);
  REQUIRE(recover_model(o).size() == 105);  // opens a segment after the snapshot's
  // A crash between a newer snapshot's rename and the truncation: the old
  // files are all still there, and the newer snapshot is damaged.
  const auto snaps = files_in(d.path + "/snap");
  REQUIRE(snaps.size() == 1);
  const auto segs = files_in(d.path + "/wal");
  const std::string newer = d.path + "/snap/" + fs::path(segs.back()).filename().replace_extension(".snap").string();
  fs::copy_file(snaps[0], newer);
  {
    std::fstream f(newer, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    f.put('X');
  }
  CHECK(recover_model(o).size() == 105);
}

TEST_CASE("wal: a failed write is cut back, so later commits are not lost behind a torn record") {
  TmpDir d;
  WalOptions o{d.path, FsyncPolicy::kNone, 10};
  Model model;
  auto w = log_with(o, 10, &model);
  const std::string seg = files_in(d.path + "/wal").back();
  const auto size = fs::file_size(seg);
  // A file size limit the next group crosses: write() stores part of it,
  // then fails with EFBIG (the signal it would raise is ignored here).
  auto* old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit old_lim;
  REQUIRE(::getrlimit(RLIMIT_FSIZE, &old_lim) == 0);
  struct rlimit lim = old_lim;
  lim.rlim_cur = rlim_t(size + 100);
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &lim) == 0);
  for (uint32_t i = 100; i < 150; ++i) w->append(put(i, 2));
  const Status st = w->commit();
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &old_lim) == 0);
  std::signal(SIGXFSZ, old_handler);
  CHECK(st.code() == StatusCode::kIo);
  CHECK(fs::file_size(seg) == size);  // the partial group is gone
  for (uint32_t i = 200; i < 210; ++i) { w->append(put(i, 3)); model[i] = 3; }
  REQUIRE(w->commit().ok());
  w.reset();
  WalStats ws;
  CHECK(recover_model(o, &ws) == model);
  CHECK(ws.truncated_tail_bytes == 0);
}

TEST_CASE("wal: a rotation that cannot open the next segment keeps the log working") {
  TmpDir d;
  WalOptions o{d.path, FsyncPolicy::kNone, 10};
  Model model;
  auto w = log_with(o, 10, &model);
  // No descriptor number may be allocated, not even one closed meanwhile
  // (the segment's own): the next open() fails with EMFILE.
  const int lowest = ::open("/dev/null", O_RDONLY);
  REQUIRE(lowest >= 0);
  ::close(lowest);
  struct rlimit old_lim;
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &old_lim) == 0);
  struct rlimit lim = old_lim;
  lim.rlim_cur = rlim_t(std::min(lowest, 3));
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &lim) == 0);
  const Status st = w->snapshot([&](const std::function<void(const WalRecord&)>& emit) {
    for (auto& [k, v] : model) emit(put(k, v));
  });
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &old_lim) == 0);
  CHECK(st.code() == StatusCode::kIo);
  for (uint32_t i = 10; i < 20; ++i) { w->append(put(i, 2)); model[i] = 2; }
  REQUIRE(w->commit().ok());
  w.reset();
  CHECK(recover_model(o) == model);
}

TEST_CASE("wal: a snapshot's DONE records (the dedup window) come back in order after its PUTs") {
  TmpDir d;
  WalOptions o{d.path, FsyncPolicy::kNone, 10};
  {
    auto w = Wal::open(o).value();
    REQUIRE(w->recover([](const WalRecord&) {}).ok());
    REQUIRE(w->snapshot([&](const std::function<void(const WalRecord&)>& emit) {
      for (uint32_t i = 0; i < 10; ++i) emit(put(i, 1));
      for (uint64_t id : {900u, 7u, 123456789u}) {
        WalRecord r;
        r.type = WalRecord::kDone;
        r.request_id = id;
        r.node = uint32_t(id % 5);
        r.undo = true;  // meaningless on DONE: not written
        emit(r);
      }
    }).ok());
  }
  std::vector<std::pair<uint64_t, uint32_t>> done;
  size_t puts = 0;
  auto w = Wal::open(o).value();
  REQUIRE(w->recover([&](const WalRecord& r) {
    if (r.type == WalRecord::kDone) {
      CHECK_FALSE(r.undo);
      done.emplace_back(r.request_id, r.node);
    } else {
      CHECK(r.type == WalRecord::kPut);
      CHECK(done.empty());  // every PUT before the DONEs
      ++puts;
    }
  }).ok());
  CHECK(puts == 10);
  CHECK(done == std::vector<std::pair<uint64_t, uint32_t>>{{900, 0}, {7, 2}, {123456789, 4}});
}

TEST_CASE("wal: recovery syncs what it replayed before appending after it (unless kNone)", "[wal]") {
  // A process killed between write() and fdatasync() leaves records in the
  // page cache only. Recovery replays them (their request ids become
  // "done": a retry is acked), so they must be made durable before the
  // owner acknowledges anything: else a power loss after the restart loses
  // records whose retries were already acked.
  TmpDir d;
  WalOptions unsynced{d.path, FsyncPolicy::kNone, 10};
  Model model;
  { auto w = log_with(unsynced, 50, &model); }  // written, never synced
  const std::string seg = files_in(d.path + "/wal").back();
  SECTION("kBatch: the replayed segment is synced") {
    WalOptions o{d.path, FsyncPolicy::kBatch, 10};
    WalStats st;
    CHECK(recover_model(o, &st) == model);
    CHECK(st.recovery_syncs == 1);
  }
  SECTION("kInterval: also after cutting a torn tail") {
    std::string extra;
    Wal::encode(put(5000, 1), &extra);
    {
      std::ofstream f(seg, std::ios::app | std::ios::binary);
      f.write(extra.data(), std::streamsize(extra.size() - 5));
    }
    WalOptions o{d.path, FsyncPolicy::kInterval, 10};
    WalStats st;
    CHECK(recover_model(o, &st) == model);
    CHECK(st.truncated_tail_bytes == extra.size() - 5);
    CHECK(st.recovery_syncs == 1);
  }
  SECTION("a snapshot and the segment after it") {
    make_snapshotted_log(WalOptions{d.path + "/s", FsyncPolicy::kNone, 10});
    WalStats st;
    CHECK(recover_model(WalOptions{d.path + "/s", FsyncPolicy::kBatch, 10}, &st).size() == 105);
    CHECK(st.recovery_syncs == 2);
  }
  SECTION("kNone never syncs") {
    WalStats st;
    CHECK(recover_model(unsynced, &st) == model);
    CHECK(st.recovery_syncs == 0);
  }
}

TEST_CASE("wal: a damaged record inside the last segment refuses to start, only a true tail is cut", "[wal]") {
  TmpDir d;
  WalOptions o{d.path, FsyncPolicy::kBatch, 10};
  Model model;
  { auto w = log_with(o, 40, &model); }  // 40 acknowledged records in one segment
  const std::string seg = files_in(d.path + "/wal").back();
  const auto size = fs::file_size(seg);
  std::string one;
  Wal::encode(put(0, 1), &one);
  const size_t rec = one.size();
  REQUIRE(size == 40 * rec);
  auto flip = [&](size_t at) {
    std::fstream f(seg, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(std::streamoff(at));
    const char c = char(f.get());
    f.seekp(std::streamoff(at));
    f.put(char(c ^ 0x5a));
  };
  SECTION("a bit flip in record 10: records 11..39 were acknowledged") {
    flip(10 * rec + 20);
    auto w = Wal::open(o).value();
    size_t replayed = 0;
    const Status st = w->recover([&](const WalRecord&) { ++replayed; });
    INFO(st.to_string());
    CHECK(st.code() == StatusCode::kCorrupt);
    CHECK(st.message().find(fs::path(seg).filename().string()) != std::string::npos);
    CHECK(st.message().find("offset " + std::to_string(10 * rec)) != std::string::npos);
    CHECK(st.message().find("offset " + std::to_string(11 * rec)) != std::string::npos);
    CHECK(fs::file_size(seg) == size);  // nothing cut
    CHECK(w->stats().truncated_tail_bytes == 0);
  }
  SECTION("a damaged length field in record 38") {
    flip(38 * rec);
    CHECK(recover_code(o) == StatusCode::kCorrupt);
    CHECK(fs::file_size(seg) == size);
  }
  SECTION("damage in the last record only is a torn tail: cut") {
    flip(39 * rec + 30);
    WalStats st;
    Model want = model;
    want.erase(39);
    CHECK(recover_model(o, &st) == want);
    CHECK(st.truncated_tail_bytes == rec);
    CHECK(fs::file_size(seg) == 39 * rec);
  }
  SECTION("a torn last write of several records: cut") {
    fs::resize_file(seg, 37 * rec + 11);  // records 37.. partly written
    WalStats st;
    Model want = model;
    for (uint32_t i = 37; i < 40; ++i) want.erase(i);
    CHECK(recover_model(o, &st) == want);
    CHECK(st.truncated_tail_bytes == 11);
  }
}

TEST_CASE("wal: an empty snapshot (no record) loads, one whose records do not fill it does not", "[wal]") {
  // Every session deleted (and no request id in the window): the snapshot
  // is magic + count 0 + checksum = 24 bytes, and must not make the owner
  // refuse to start with "no RIB snapshot verifies".
  TmpDir d;
  WalOptions o{d.path, FsyncPolicy::kBatch, 10};
  {
    Model m;
    auto w = log_with(o, 10, &m);
    for (uint32_t i = 0; i < 10; ++i) {
      WalRecord del = put(i, 1);
      del.type = WalRecord::kDel;
      w->append(del);
    }
    REQUIRE(w->commit().ok());
    REQUIRE(w->snapshot([](const std::function<void(const WalRecord&)>&) {}).ok());
  }
  const auto snaps = files_in(d.path + "/snap");
  REQUIRE(snaps.size() == 1);
  REQUIRE(fs::file_size(snaps[0]) == 24);
  WalStats st;
  CHECK(recover_model(o, &st).empty());
  // Bytes between the last record and the checksum (a count too small for
  // the file, with a checksum over all of it) are not a snapshot.
  std::string b;
  {
    std::ifstream f(snaps[0], std::ios::binary);
    b.assign(std::istreambuf_iterator<char>(f), {});
  }
  b.resize(16);
  Wal::encode(put(1, 1), &b);  // one record, count still 0
  const uint64_t sum = checksum64(b.data(), b.size());
  b.append(reinterpret_cast<const char*>(&sum), 8);
  { std::ofstream(snaps[0], std::ios::binary | std::ios::trunc).write(b.data(), std::streamsize(b.size())); }
  CHECK(recover_code(o) == StatusCode::kCorrupt);
}

TEST_CASE("wal: close() syncs commits the interval policy left unsynced", "[wal]") {
  TmpDir d;
  WalOptions o{d.path, FsyncPolicy::kInterval, 60000};  // no interval passes in this test
  auto w = Wal::open(o).value();
  REQUIRE(w->recover([](const WalRecord&) {}).ok());
  w->append(put(1, 1));
  REQUIRE(w->commit().ok());  // the first sync (the last one was "never")
  const uint64_t s0 = w->stats().syncs;
  w->append(put(2, 1));
  REQUIRE(w->commit().ok());  // acked, not synced: the interval has not passed
  REQUIRE(w->stats().syncs == s0);
  REQUIRE(w->close().ok());
  CHECK(w->stats().syncs == s0 + 1);
  CHECK(w->commit().code() == StatusCode::kFailedPrecondition);
  // kNone: close() does not sync.
  TmpDir d2;
  auto n = Wal::open(WalOptions{d2.path, FsyncPolicy::kNone, 10}).value();
  REQUIRE(n->recover([](const WalRecord&) {}).ok());
  n->append(put(1, 1));
  REQUIRE(n->commit().ok());
  REQUIRE(n->close().ok());
  CHECK(n->stats().syncs == 0);
}

namespace {
// Sets or clears the append-only attribute (chattr +a) of path; false when
// this filesystem or process cannot (not root, tmpfs).
bool set_append_only(const std::string& path, bool on) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return false;
  int flags = 0;
  bool ok = ::ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0;
  if (ok) {
    flags = on ? (flags | FS_APPEND_FL) : (flags & ~FS_APPEND_FL);
    ok = ::ioctl(fd, FS_IOC_SETFLAGS, &flags) == 0;
  }
  ::close(fd);
  return ok;
}
}  // namespace

TEST_CASE("wal: a broken log refuses snapshots instead of rotating past its torn tail", "[wal]") {
  // A write fails half-way and cutting the segment back fails too: the
  // torn tail stays and the log is broken. A snapshot used to open the
  // next segment anyway, leaving the torn record in a segment that is not
  // the last: every restart was refused (kCorrupt).
  TmpDir d;
  WalOptions o{d.path, FsyncPolicy::kNone, 10};
  Model model;
  auto w = log_with(o, 10, &model);
  const std::string seg = files_in(d.path + "/wal").back();
  const auto size = fs::file_size(seg);
  if (!set_append_only(seg, true)) {  // ftruncate fails with EPERM on an append-only file
    WARN("cannot set the append-only attribute here (needs root and ext4/xfs): nothing to check");
    return;
  }
  auto* old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit old_lim;
  REQUIRE(::getrlimit(RLIMIT_FSIZE, &old_lim) == 0);
  struct rlimit lim = old_lim;
  lim.rlim_cur = rlim_t(size + 100);
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &lim) == 0);
  for (uint32_t i = 100; i < 150; ++i) w->append(put(i, 2));
  const Status st = w->commit();
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &old_lim) == 0);
  std::signal(SIGXFSZ, old_handler);
  const auto torn = fs::file_size(seg);
  const Status sn = w->snapshot([&](const std::function<void(const WalRecord&)>& emit) {
    for (auto& [k, v] : model) emit(put(k, v));
  });
  const size_t segments = files_in(d.path + "/wal").size();
  const size_t snaps = files_in(d.path + "/snap").size();
  REQUIRE(set_append_only(seg, false));
  CHECK(st.code() == StatusCode::kIo);
  CHECK(torn > size);  // the torn tail is there
  CHECK(sn.code() == StatusCode::kIo);
  CHECK(segments == 1);
  CHECK(snaps == 0);
  // The tail is still the last segment's: a restart keeps the whole
  // records of the failed write (never acked: either outcome is allowed)
  // and cuts the torn one.
  w.reset();
  std::string one;
  Wal::encode(put(100, 2), &one);
  const size_t whole = size_t(torn - size) / one.size();
  Model want = model;
  for (uint32_t i = 100; i < 100 + whole; ++i) want[i] = 2;
  WalStats ws;
  CHECK(recover_model(o, &ws) == want);
  CHECK(ws.truncated_tail_bytes == torn - size - whole * one.size());
  CHECK(ws.truncated_tail_bytes > 0);
}

TEST_CASE("wal: a verified record with an impossible field is refused, naming it", "[wal]") {
  // The checksum proves the bytes are what was written, not that they are
  // a session: a node id >= 32 would be a shift out of range when the
  // owner places it (placement_mask), a non-canonical key never matches a
  // packet's key, and the all-0xff key is the RIB maps' empty slot.
  struct Case {
    const char* what;
    WalRecord rec;
    const char* says;
  };
  std::vector<Case> cases;
  {
    WalRecord r = put(7, 40);
    cases.push_back({"node 40", r, "node id"});
    r = put(7, 1);
    r.bearer = 16;
    cases.push_back({"bearer 16", r, "bearer"});
    r = put(7, 1);
    r.key.bytes[14] = 1;
    cases.push_back({"key byte 14", r, "key bytes 13..15"});
    r = put(7, 1);
    std::memset(r.key.bytes, 0xff, 16);
    cases.push_back({"the all-0xff key", r, "key bytes 13..15"});
    r = put(7, 1);
    r.type = WalRecord::kDel;
    r.key.bytes[13] = 9;
    cases.push_back({"a DEL of a non-canonical key", r, "key bytes 13..15"});
  }
  for (const Case& c : cases) {
    INFO(c.what);
    TmpDir d;
    WalOptions o{d.path, FsyncPolicy::kNone, 10};
    Model model;
    { auto w = log_with(o, 5, &model); }
    const std::string seg = files_in(d.path + "/wal").back();
    const auto size = fs::file_size(seg);
    std::string b;
    Wal::encode(c.rec, &b);  // a valid checksum
    Wal::encode(put(8, 1), &b);
    { std::ofstream(seg, std::ios::app | std::ios::binary).write(b.data(), std::streamsize(b.size())); }
    auto w = Wal::open(o).value();
    size_t replayed = 0;
    const Status st = w->recover([&](const WalRecord&) { ++replayed; });
    INFO(st.to_string());
    CHECK(st.code() == StatusCode::kCorrupt);
    CHECK(st.message().find(c.says) != std::string::npos);
    CHECK(st.message().find("offset " + std::to_string(size)) != std::string::npos);
    CHECK(st.message().find("request_id 8") != std::string::npos);
    CHECK(replayed == 5);
    CHECK(fs::file_size(seg) == size + b.size());  // nothing cut
  }
  SECTION("in a snapshot") {
    TmpDir d;
    WalOptions o{d.path, FsyncPolicy::kNone, 10};
    {
      auto w = Wal::open(o).value();
      REQUIRE(w->recover([](const WalRecord&) {}).ok());
      REQUIRE(w->snapshot([&](const std::function<void(const WalRecord&)>& emit) {
        emit(put(1, 1));
        emit(put(2, 33));
      }).ok());
    }
    auto w = Wal::open(o).value();
    const Status st = w->recover([](const WalRecord&) {});
    INFO(st.to_string());
    CHECK(st.code() == StatusCode::kCorrupt);
    CHECK(st.message().find("record 1") != std::string::npos);
    CHECK(st.message().find("node 33") != std::string::npos);
  }
}

TEST_CASE("wal: a segment or snapshot too large for memory is a clear error, not a crash", "[wal]") {
  // read_file() sized one std::string by st_size: a huge file (a sparse
  // one here, 1 TiB; or anything misplaced in the data dir) threw an
  // uncaught std::bad_alloc out of recovery.
  TmpDir d;
  WalOptions o{d.path, FsyncPolicy::kNone, 10};
  std::string path;
  SECTION("a segment") {
    Model m;
    { auto w = log_with(o, 5, &m); }
    path = files_in(d.path + "/wal").back();
  }
  SECTION("a snapshot") {
    make_snapshotted_log(o);
    path = files_in(d.path + "/snap").back();
  }
  std::error_code ec;
  fs::resize_file(path, uint64_t(1) << 40, ec);
  if (ec) {
    WARN("cannot make a 1 TiB sparse file here: " << ec.message());
    return;
  }
  Status st;
  auto w = Wal::open(o).value();
  CHECK_NOTHROW(st = w->recover([](const WalRecord&) {}));
  fs::remove(path);
  INFO(st.to_string());
  CHECK(st.code() == StatusCode::kCapacity);
  CHECK(st.message().find(fs::path(path).filename().string()) != std::string::npos);
  CHECK(st.message().find("1099511627776 bytes") != std::string::npos);
}

TEST_CASE("wal: a failed or interrupted snapshot leaves no temp file behind", "[wal]") {
  // A snapshot is written to snap/S.snap.tmp first. One whose write failed
  // (disk full) or that a crash interrupted used to stay there for good:
  // recovery lists only *.snap and the next snapshot has another number, so
  // every failure kept up to a whole RIB's bytes, and a disk that filled up
  // once stayed full across restarts.
  TmpDir d;
  WalOptions o{d.path, FsyncPolicy::kBatch, 10};
  Model model;
  SECTION("the write fails (file size limit: EFBIG, as ENOSPC)") {
    auto w = log_with(o, 100, &model);
    auto* old_handler = std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit old_lim;
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &old_lim) == 0);
    struct rlimit lim = old_lim;
    lim.rlim_cur = 1000;  // the snapshot has 100 records of 53 bytes
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &lim) == 0);
    const Status st = w->snapshot([&](const std::function<void(const WalRecord&)>& emit) {
      for (auto& [k, v] : model) emit(put(k, v));
    });
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &old_lim) == 0);
    std::signal(SIGXFSZ, old_handler);
    CHECK(st.code() == StatusCode::kIo);
    CHECK(files_in(d.path + "/snap").empty());
    w.reset();
    CHECK(recover_model(o) == model);
  }
  SECTION("a crash while it was written: recovery removes it") {
    { auto w = log_with(o, 100, &model); }
    const std::string tmp = d.path + "/snap/0000000000000002.snap.tmp";
    { std::ofstream(tmp, std::ios::binary) << std::string(1000, 'x'); }
    const std::string other = d.path + "/snap/notes.tmp";  // not ours: kept
    { std::ofstream(other) << "x"; }
    CHECK(recover_model(o) == model);
    CHECK_FALSE(fs::exists(tmp));
    CHECK(fs::exists(other));
  }
}

TEST_CASE("wal: a snapshot that cannot be read is reported as such, not as one that does not verify", "[wal]") {
  // A read error (permissions after a run as another user, EIO) used to be
  // taken for a snapshot that does not verify: "no RIB snapshot in snap/
  // verifies" (kCorrupt), whose remedy is a backup or an empty start, when
  // the snapshot may be intact. Root ignores permissions, so a directory in
  // its place stands in for the unreadable file (read() fails: EISDIR).
  TmpDir d;
  WalOptions o{d.path, FsyncPolicy::kNone, 10};
  make_snapshotted_log(o);
  const auto snaps = files_in(d.path + "/snap");
  REQUIRE(snaps.size() == 1);
  fs::remove(snaps[0]);
  fs::create_directory(snaps[0]);
  auto w = Wal::open(o).value();
  const Status st = w->recover([](const WalRecord&) {});
  INFO(st.to_string());
  CHECK(st.code() == StatusCode::kIo);
  CHECK(st.message().find(fs::path(snaps[0]).filename().string()) != std::string::npos);
  CHECK(st.message().find(std::strerror(EISDIR)) != std::string::npos);
  CHECK(st.message().find("verifies") == std::string::npos);
}

TEST_CASE("wal: a log directory that cannot be listed is an error, never an empty RIB", "[wal]") {
  // A failed listing of wal/ or snap/ (EACCES after a run as another user,
  // EIO, a file in the directory's place) used to read as "no segments, no
  // snapshot": the owner started with an empty (or snapshot-only) RIB, and
  // its reconciling re-push then deleted the node's sessions on every node.
  // Root ignores permissions: a file in the directory's place stands in for
  // the directory that cannot be listed (ENOTDIR).
  TmpDir d;
  WalOptions o{d.path, FsyncPolicy::kBatch, 10};
  Model model;
  { auto w = log_with(o, 100, &model); }
  for (const char* sub : {"wal", "snap"}) {
    INFO(sub);
    auto w = Wal::open(o).value();
    const std::string dir = d.path + "/" + sub, kept = d.path + "/kept";
    fs::rename(dir, kept);
    { std::ofstream(dir) << "x"; }
    uint64_t replayed = 0;
    const Status st = w->recover([&](const WalRecord&) { ++replayed; });
    fs::remove(dir);
    fs::rename(kept, dir);
    INFO(st.to_string());
    CHECK(st.code() == StatusCode::kIo);
    CHECK(st.message().find("refusing to start") != std::string::npos);
    CHECK(st.message().find(dir) != std::string::npos);
    CHECK(replayed == 0);
  }
  CHECK(recover_model(o) == model);  // the directories back: everything is there
}

TEST_CASE("wal: a group whose fdatasync fails is answered 'outcome unknown', and replays at the restart", "[wal]") {
  // The group's records were written (page cache) when fdatasync failed:
  // they replay at the restart if the disk kept them, so "the ops failed"
  // (what the group's clients used to get) could be false.
  TmpDir d;
  WalOptions o{d.path, FsyncPolicy::kBatch, 10};
  o.sync_fn = [](int) {
    errno = EIO;
    return -1;
  };
  Model model;
  {
    auto w = Wal::open(o).value();
    REQUIRE(w->recover([](const WalRecord&) {}).ok());
    for (uint32_t i = 0; i < 10; ++i) {
      w->append(put(i, 1));
      model[i] = 1;
    }
    const Status st = w->commit();
    INFO(st.to_string());
    CHECK(st.code() == StatusCode::kIo);
    CHECK(st.message().find("outcome unknown") != std::string::npos);
    CHECK(st.message().find(std::strerror(EIO)) != std::string::npos);
    // The log is broken for good; a later group was never written: it fails.
    w->append(put(99, 1));
    const Status later = w->commit();
    CHECK(later.code() == StatusCode::kIo);
    CHECK(later.message().find("outcome unknown") == std::string::npos);
  }
  o.sync_fn = nullptr;
  CHECK(recover_model(o) == model);  // the first group took effect, the later one did not
}

namespace {
WalRecord teid(uint32_t i, uint32_t node, uint32_t teid_ul) {
  WalRecord r;
  r.type = WalRecord::kTeid;
  r.key = FlowKey::five_tuple(i, i * 7, 1, 2, 17);
  r.node = node;
  r.teid_ul = teid_ul;
  return r;
}
}  // namespace

TEST_CASE("wal: TEID records survive the log and snapshots, in order after their PUT", "[teid]") {
  TmpDir d;
  WalOptions o{d.path, FsyncPolicy::kBatch, 10};
  {
    auto w = Wal::open(o).value();
    REQUIRE(w->recover([](const WalRecord&) {}).ok());
    w->append(put(1, 3));
    w->append(teid(1, 3, 3u << 27 | 42));
    REQUIRE(w->commit().ok());
    // A snapshot holds the state: PUT then TEID (and the TEID type stays).
    REQUIRE(w->snapshot([&](const std::function<void(const WalRecord&)>& emit) {
      emit(put(1, 3));
      emit(teid(1, 3, 3u << 27 | 42));
    }).ok());
    w->append(put(2, 5));
    w->append(teid(2, 5, 5u << 27 | 7));
    REQUIRE(w->commit().ok());
  }
  std::vector<WalRecord> got;
  auto w = Wal::open(o).value();
  REQUIRE(w->recover([&](const WalRecord& r) { got.push_back(r); }).ok());
  REQUIRE(got.size() == 4);
  CHECK(got[0].type == WalRecord::kPut);
  CHECK(got[1].type == WalRecord::kTeid);
  CHECK(got[1].key == put(1, 3).key);
  CHECK(got[1].node == 3);
  CHECK(got[1].teid_ul == (3u << 27 | 42));
  CHECK(got[1].request_id == 0);
  CHECK_FALSE(got[1].undo);
  CHECK(got[3].type == WalRecord::kTeid);
  CHECK(got[3].teid_ul == (5u << 27 | 7));
}

TEST_CASE("wal: a TEID record naming another node, teid 0 or an undo flag is refused", "[teid]") {
  TmpDir d;
  WalOptions o{d.path, FsyncPolicy::kBatch, 10};
  {
    auto w = Wal::open(o).value();
    REQUIRE(w->recover([](const WalRecord&) {}).ok());
    w->append(put(1, 3));
    REQUIRE(w->commit().ok());
  }
  std::string seg;
  for (auto& e : fs::directory_iterator(d.path + "/wal")) seg = std::max(seg, e.path().string());
  std::string extra;
  std::string want;
  SECTION("another node") {
    Wal::encode(teid(1, 3, 4u << 27 | 42), &extra);
    want = "does not name";
  }
  SECTION("teid 0") {
    Wal::encode(teid(1, 3, 0), &extra);
    want = "does not name";
  }
  SECTION("an undo flag") {
    Wal::encode(teid(1, 3, 3u << 27 | 42), &extra);
    extra[5] = 1;
    const uint64_t sum = checksum64(extra.data(), extra.size() - 8);
    std::memcpy(&extra[extra.size() - 8], &sum, 8);
    want = "newer version";
  }
  {
    std::ofstream f(seg, std::ios::app | std::ios::binary);
    f.write(extra.data(), std::streamsize(extra.size()));
  }
  auto w = Wal::open(o).value();
  const Status st = w->recover([](const WalRecord&) {});
  INFO(st.to_string());
  CHECK(st.code() == StatusCode::kCorrupt);
  CHECK(st.message().find(want) != std::string::npos);
}
