#include "rib/wal.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "core/checksum.h"
#include "rib/cluster.h"

namespace sb::rib {

namespace fs = std::filesystem;

const char* fsync_policy_name(FsyncPolicy p) {
  switch (p) {
    case FsyncPolicy::kBatch: return "batch";
    case FsyncPolicy::kInterval: return "interval";
    case FsyncPolicy::kNone: return "none";
  }
  return "?";
}

namespace {

constexpr size_t kHdr = 8;   // len, type, flags, pad; the checksum trails the payload
constexpr uint8_t kFlagUndo = 1;
constexpr size_t kPutLen = 16 + 4 + 4 + 4 + 1 + 8;
constexpr size_t kDelLen = 16 + 8;
constexpr size_t kDoneLen = 8 + 4;
constexpr size_t kTeidLen = 16 + 4 + 4;
size_t payload_len(uint8_t type) {
  switch (type) {
    case WalRecord::kPut: return kPutLen;
    case WalRecord::kDel: return kDelLen;
    case WalRecord::kDone: return kDoneLen;
    case WalRecord::kTeid: return kTeidLen;
    default: return 0;
  }
}
constexpr uint64_t kSnapMagic = 0x31504e5342525342ULL;  // "BSRBSNP1"

void put32(std::string* o, uint32_t v) { o->append(reinterpret_cast<const char*>(&v), 4); }
void put64(std::string* o, uint64_t v) { o->append(reinterpret_cast<const char*>(&v), 8); }
uint32_t get32(const char* p) { uint32_t v; std::memcpy(&v, p, 4); return v; }
uint64_t get64(const char* p) { uint64_t v; std::memcpy(&v, p, 8); return v; }

uint64_t now_ns() {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch()).count());
}

std::string seg_name(uint64_t s) {
  char b[32];
  std::snprintf(b, sizeof b, "%016llx", (unsigned long long)s);
  return b;
}

// Numbers of files "<16 hex>.<ext>" in dir, ascending.
// The numbers of dir's files named <16 hex digits><ext>, sorted. A
// directory that cannot be listed is an error, never an empty list: read
// as "no log, no snapshot", it would start the owner with an empty RIB,
// and its reconciling re-push would then delete the node's sessions on
// every node.
Status list_numbered(const std::string& dir, const std::string& ext, std::vector<uint64_t>* out) {
  out->clear();
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (n.size() != 16 + ext.size() || n.compare(16, ext.size(), ext) != 0) continue;
    char* end = nullptr;
    const uint64_t v = std::strtoull(n.substr(0, 16).c_str(), &end, 16);
    if (end && *end == '\0') out->push_back(v);
  }
  if (ec) return Status::Io(dir + ": cannot list: " + ec.message());
  std::sort(out->begin(), out->end());
  return Status::Ok();
}

// Reads a whole segment or snapshot. A file larger than this machine's
// memory (or one the allocation fails for) is a clear kCapacity error, not
// an uncaught std::bad_alloc.
Status read_file(const std::string& path, std::string* out) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return Status::Io(path + ": open: " + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    return Status::Io(path + ": fstat: " + std::strerror(e));
  }
  const uint64_t size = uint64_t(st.st_size);
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  const uint64_t mem = pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : 0;
  if (mem != 0 && size > mem) {
    ::close(fd);
    return Status::Capacity(path + ": " + std::to_string(size) + " bytes, more than this machine's memory (" +
                            std::to_string(mem) + " bytes): cannot be read for recovery");
  }
  try {
    out->resize(size_t(size));
  } catch (const std::exception&) {  // bad_alloc, length_error
    ::close(fd);
    return Status::Capacity(path + ": no memory to read its " + std::to_string(size) + " bytes for recovery");
  }
  size_t got = 0;
  while (got < out->size()) {
    const ssize_t r = ::read(fd, out->data() + got, out->size() - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      const int e = errno;
      ::close(fd);
      return Status::Io(path + ": read: " + (r == 0 ? std::string("shorter than its size") : std::strerror(e)));
    }
    got += size_t(r);
  }
  ::close(fd);
  return Status::Ok();
}

// What decode() found at a position.
enum class Decoded {
  kOk,       // a whole record this version knows
  kTorn,     // too short, or the checksum does not verify: torn or damaged
  kUnknown,  // the checksum verifies but the header (type, flag bits,
             // padding, length) is not one this version writes: a newer
             // version wrote it (or a bug); never cut off as a torn tail
};

// Decodes one record at p (n bytes available) into *r; *used = its size.
Decoded decode(const char* p, size_t n, WalRecord* r, size_t* used) {
  *used = 0;
  if (n < kHdr) return Decoded::kTorn;
  const uint32_t len = get32(p);
  if (n - kHdr < size_t(len) + 8) return Decoded::kTorn;
  if (checksum64(p, kHdr + len) != get64(p + kHdr + len)) return Decoded::kTorn;
  const uint8_t type = uint8_t(p[4]);
  if ((uint8_t(p[5]) & ~kFlagUndo) != 0 || p[6] != 0 || p[7] != 0) return Decoded::kUnknown;
  if (payload_len(type) == 0 || len != payload_len(type)) return Decoded::kUnknown;
  if ((type == WalRecord::kDone || type == WalRecord::kTeid) && p[5] != 0)
    return Decoded::kUnknown;  // nothing to undo
  *used = kHdr + len + 8;
  const char* q = p + kHdr;
  r->type = WalRecord::Type(type);
  r->undo = (uint8_t(p[5]) & kFlagUndo) != 0;
  r->teid_ul = 0;
  if (type == WalRecord::kDone) {
    r->key = FlowKey{};
    r->request_id = get64(q);
    r->node = get32(q + 8);
    r->teid_dl = r->enb_ip = 0;
    r->bearer = 0;
    return Decoded::kOk;
  }
  std::memcpy(r->key.bytes, q, 16);
  if (type == WalRecord::kTeid) {
    r->node = get32(q + 16);
    r->teid_ul = get32(q + 20);
    r->teid_dl = r->enb_ip = 0;
    r->bearer = 0;
    r->request_id = 0;
    return Decoded::kOk;
  }
  if (type == WalRecord::kPut) {
    r->node = get32(q + 16);
    r->teid_dl = get32(q + 20);
    r->enb_ip = get32(q + 24);
    r->bearer = uint8_t(q[28]);
    r->request_id = get64(q + 29);
  } else {
    r->node = r->teid_dl = r->enb_ip = 0;
    r->bearer = 0;
    r->request_id = get64(q + 16);
  }
  return Decoded::kOk;
}

// The first position >= from in b where a whole record of a known type and
// length starts (its checksum verifies; flag bits not checked), or npos. A
// torn tail is the end of the last write: nothing whole can follow it.
size_t find_record(const std::string& b, size_t from) {
  for (size_t at = from; at + kHdr + 8 <= b.size(); ++at) {
    const char* p = b.data() + at;
    const size_t len = payload_len(uint8_t(p[4]));
    if (len == 0 || get32(p) != len || p[6] != 0 || p[7] != 0) continue;
    if (b.size() - at < kHdr + len + 8) continue;
    if (checksum64(p, kHdr + len) == get64(p + kHdr + len)) return at;
  }
  return std::string::npos;
}

// A field no record of this version holds (its checksum verified: written
// by a bug or a newer version). nullptr: the record is fine. Replaying such
// a record would put an impossible session in the RIB (a node id >= 32 is
// a shift out of range in placement_mask()).
const char* invalid_field(const WalRecord& r) {
  if (r.type != WalRecord::kDone && (r.key.bytes[13] | r.key.bytes[14] | r.key.bytes[15]) != 0)
    return "key bytes 13..15 are not zero (not a canonical key; all-0xff is the empty slot of the RIB's maps)";
  if (r.type != WalRecord::kDel && r.node >= kMaxNodes) return "node id is not below 32";
  if (r.type == WalRecord::kPut && r.bearer > 15) return "bearer is above 15 (EPS bearer ids are 0..15)";
  if (r.type == WalRecord::kTeid && (r.teid_ul == 0 || r.teid_ul >> 27 != r.node))
    return "teid_ul is 0 or does not name the record's node (its top 5 bits)";
  return nullptr;
}

std::string describe(const WalRecord& r) {
  const char* t = r.type == WalRecord::kPut    ? "PUT"
                  : r.type == WalRecord::kDel  ? "DEL"
                  : r.type == WalRecord::kTeid ? "TEID"
                                               : "DONE";
  std::string s = std::string(t) + " request_id " + std::to_string(r.request_id);
  if (r.type != WalRecord::kDone) s += " key " + r.key.to_string();
  if (r.type != WalRecord::kDel) s += " node " + std::to_string(r.node);
  if (r.type == WalRecord::kPut) s += " bearer " + std::to_string(r.bearer);
  if (r.type == WalRecord::kTeid) s += " teid_ul " + std::to_string(r.teid_ul);
  return s;
}

Status write_all(int fd, const char* p, size_t n, const std::string& what) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return Status::Io(what + ": write: " + std::strerror(errno));
    }
    p += w;
    n -= size_t(w);
  }
  return Status::Ok();
}

}  // namespace

void Wal::encode(const WalRecord& r, std::string* out) {
  const size_t start = out->size();
  const uint32_t len = uint32_t(payload_len(r.type));
  put32(out, len);
  out->push_back(char(r.type));
  out->push_back(char(r.undo && r.type != WalRecord::kDone && r.type != WalRecord::kTeid ? kFlagUndo : 0));
  out->append(2, '\0');
  if (r.type == WalRecord::kDone) {
    put64(out, r.request_id);
    put32(out, r.node);
    put64(out, checksum64(out->data() + start, kHdr + len));
    return;
  }
  out->append(reinterpret_cast<const char*>(r.key.bytes), 16);
  if (r.type == WalRecord::kTeid) {
    put32(out, r.node);
    put32(out, r.teid_ul);
    put64(out, checksum64(out->data() + start, kHdr + len));
    return;
  }
  if (r.type == WalRecord::kPut) {
    put32(out, r.node);
    put32(out, r.teid_dl);
    put32(out, r.enb_ip);
    out->push_back(char(r.bearer));
  }
  put64(out, r.request_id);
  put64(out, checksum64(out->data() + start, kHdr + len));
}

Result<std::unique_ptr<Wal>> Wal::open(const WalOptions& opt) {
  if (opt.dir.empty()) return Status::InvalidArgument("wal: empty data dir");
  std::error_code ec;
  fs::create_directories(opt.dir + "/wal", ec);
  if (ec) return Status::Io(opt.dir + "/wal: " + ec.message());
  fs::create_directories(opt.dir + "/snap", ec);
  if (ec) return Status::Io(opt.dir + "/snap: " + ec.message());
  return std::unique_ptr<Wal>(new Wal(opt));
}

Wal::~Wal() { (void)close(); }

Status Wal::close() {
  if (fd_ < 0) return Status::Ok();
  Status st = buf_.empty() ? Status::Ok() : commit();
  // Under kInterval the last commits may be younger than the interval: an
  // orderly shutdown makes them durable too.
  if (st.ok() && dirty_ && broken_.ok() && opt_.fsync != FsyncPolicy::kNone) {
    if (::fdatasync(fd_) != 0) {
      st = Status::Io(std::string("wal: fdatasync at close: ") + std::strerror(errno));
    } else {
      ++stats_.syncs;
      dirty_ = false;
    }
  }
  ::close(fd_);
  fd_ = -1;
  return st;
}

Status Wal::sync_dir(const std::string& d) {
  const int fd = ::open(d.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return Status::Io(d + ": open dir");
  const int r = ::fsync(fd);
  ::close(fd);
  return r == 0 ? Status::Ok() : Status::Io(d + ": fsync dir");
}

Status Wal::sync_file(const std::string& p) {
  const int fd = ::open(p.c_str(), O_RDONLY);
  if (fd < 0) return Status::Io(p + ": open: " + std::strerror(errno));
  const int r = ::fdatasync(fd);
  const int e = errno;
  ::close(fd);
  if (r != 0) return Status::Io(p + ": fdatasync: " + std::strerror(e));
  ++stats_.recovery_syncs;
  return Status::Ok();
}

Status Wal::open_segment(uint64_t seg) {
  // The new segment is opened before the current one is closed: on failure
  // the log keeps working in the current one.
  const std::string p = opt_.dir + "/wal/" + seg_name(seg) + ".log";
  const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);  // subscriber data: owner only
  if (fd < 0) return Status::Io(p + ": open: " + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    return Status::Io(p + ": fstat: " + std::strerror(e));
  }
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
  seg_ = seg;
  seg_bytes_ = uint64_t(st.st_size);
  if (opt_.fsync != FsyncPolicy::kNone) SB_RETURN_IF_ERROR(sync_dir(opt_.dir + "/wal"));
  return Status::Ok();
}

Status Wal::recover(const std::function<void(const WalRecord&)>& replay) {
  // 0. a snapshot a crash interrupted before its rename (snap/S.snap.tmp):
  // never read, and nothing else would remove it (the owner holds the data
  // dir's lock, so no other process is writing it).
  const char* refuse = "wal: cannot read the RIB, refusing to start";
  std::vector<uint64_t> snaps, segs;
  SB_RETURN_IF_ERROR(list_numbered(opt_.dir + "/snap", ".snap.tmp", &snaps).with_context(refuse));
  for (uint64_t s : snaps) ::unlink((opt_.dir + "/snap/" + seg_name(s) + ".snap.tmp").c_str());
  // 1. newest verifying snapshot (its bytes are kept for step 3)
  uint64_t base = 0;
  std::string snap;
  SB_RETURN_IF_ERROR(list_numbered(opt_.dir + "/snap", ".snap", &snaps).with_context(refuse));
  for (auto it = snaps.rbegin(); it != snaps.rend(); ++it) {
    std::string b;
    // A snapshot that cannot be read (kIo: permissions after a run as
    // another user, EIO; kCapacity) is not one that does not verify: say
    // why. Taking it for a damaged one would report the RIB corrupt (whose
    // remedy is a backup or an empty start) when the file may be intact.
    if (Status rs = read_file(opt_.dir + "/snap/" + seg_name(*it) + ".snap", &b); !rs.ok())
      return rs.with_context("wal: cannot read a RIB snapshot, refusing to start");
    // magic, count, records, checksum: 24 bytes when there is no record
    if (b.size() < 24 || get64(b.data()) != kSnapMagic) continue;
    const uint64_t count = get64(b.data() + 8);
    if (checksum64(b.data(), b.size() - 8) != get64(b.data() + b.size() - 8)) continue;
    size_t off = 16;
    bool ok = true;
    for (uint64_t i = 0; i < count && ok; ++i) {
      WalRecord r;
      size_t used = 0;
      ok = decode(b.data() + off, b.size() - 8 - off, &r, &used) == Decoded::kOk;
      off += used;
    }
    if (!ok || off != b.size() - 8) continue;  // the records fill the file exactly
    base = *it;
    snap = std::move(b);
    break;
  }
  // 2. the log after it must be complete (see the header): checked before
  // anything is replayed.
  SB_RETURN_IF_ERROR(list_numbered(opt_.dir + "/wal", ".log", &segs).with_context(refuse));
  const std::string where = opt_.dir + ": ";
  if (!snaps.empty() && base == 0)
    return Status::Corrupt(where + "no RIB snapshot in snap/ verifies (newest " +
                           seg_name(snaps.back()) + ".snap): refusing to start with part of the RIB");
  {
    const uint64_t first = base == 0 ? 1 : base;
    uint64_t expect = first;
    for (uint64_t s : segs) {
      if (s < base) continue;
      if (s != expect)
        return Status::Corrupt(where + "wal/" + seg_name(expect) + ".log is missing (next is " +
                               seg_name(s) + ".log): refusing to start with part of the RIB");
      ++expect;
    }
    if (base != 0 && expect == first)
      return Status::Corrupt(where + "wal/" + seg_name(base) + ".log (the log after snapshot " +
                             seg_name(base) + ") is missing: refusing to start with part of the RIB");
  }
  // 3. the snapshot's records (verified in step 1), then segments >= base
  if (base != 0) {
    size_t off = 16;
    replay_file_ = "snap/" + seg_name(base) + ".snap";
    for (uint64_t i = 0, n = get64(snap.data() + 8); i < n; ++i) {
      WalRecord r;
      size_t used = 0;
      if (decode(snap.data() + off, snap.size() - 8 - off, &r, &used) != Decoded::kOk)
        // the file's checksum verified, its records must too
        return Status::Corrupt(where + "snap/" + seg_name(base) + ".snap: record " + std::to_string(i) +
                               " does not decode: refusing to start with part of the RIB");
      if (const char* bad = invalid_field(r))
        return Status::Corrupt(where + "snap/" + seg_name(base) + ".snap: record " + std::to_string(i) + " (" +
                               describe(r) + "): " + bad + ": refusing to start");
      replay_off_ = off;
      off += used;
      replay(r);
    }
    std::string().swap(snap);
  }
  uint64_t last = base;
  std::vector<std::string> replayed;
  for (size_t i = 0; i < segs.size(); ++i) {
    if (segs[i] < base) continue;
    const std::string p = opt_.dir + "/wal/" + seg_name(segs[i]) + ".log";
    std::string b;
    SB_RETURN_IF_ERROR(read_file(p, &b));
    replay_file_ = "wal/" + seg_name(segs[i]) + ".log";
    size_t off = 0;
    while (off < b.size()) {
      WalRecord r;
      size_t used = 0;
      const Decoded d = decode(b.data() + off, b.size() - off, &r, &used);
      if (d == Decoded::kUnknown)
        return Status::Corrupt(p + ": the record at offset " + std::to_string(off) +
                               " verifies but has a type, flag bits or length this version does not know "
                               "(written by a newer version?): refusing to start rather than drop it");
      if (d != Decoded::kOk) break;
      if (const char* bad = invalid_field(r))
        return Status::Corrupt(p + ": the record at offset " + std::to_string(off) + " (" + describe(r) +
                               ") verifies but " + bad + ": refusing to start rather than replay or drop it");
      replay_off_ = off;
      replay(r);
      ++since_snap_;
      off += used;
    }
    if (off < b.size()) {
      const bool is_last = i + 1 == segs.size();
      if (!is_last)
        return Status::Corrupt(p + ": corrupt record at offset " + std::to_string(off) +
                               " in a segment that is not the last");
      // A torn tail is only the last write: a whole record after the bad
      // one means the damage is inside acknowledged records. Cutting there
      // would drop them silently.
      if (const size_t next = find_record(b, off + 1); next != std::string::npos)
        return Status::Corrupt(
            p + ": the record at offset " + std::to_string(off) + " does not verify but a whole record follows at offset " +
            std::to_string(next) + " (" + std::to_string(b.size() - off) +
            " bytes after it): damage inside the log, not a torn tail; refusing to start rather than drop the "
            "acknowledged records after it (restore the data dir from a backup; if the machine lost power while "
            "this segment was written, `truncate -s " + std::to_string(off) + "` of it accepts losing them)");
      stats_.truncated_tail_bytes += b.size() - off;
      if (::truncate(p.c_str(), off_t(off)) != 0) return Status::Io(p + ": truncate");
    }
    last = segs[i];
    replayed.push_back(p);
  }
  // What was replayed came through the page cache: a process killed before
  // its fdatasync left records that are not durable yet, and replaying them
  // turns their request ids into "done" (a retry is acked). Make them (and
  // a truncation) durable before anything is acknowledged on top of them.
  // Every replayed file, not only the last: a log written by an older
  // binary may hold unsynced segments before the last one.
  if (opt_.fsync != FsyncPolicy::kNone && (base != 0 || !replayed.empty())) {
    if (base != 0) SB_RETURN_IF_ERROR(sync_file(opt_.dir + "/snap/" + seg_name(base) + ".snap"));
    for (const std::string& p : replayed) SB_RETURN_IF_ERROR(sync_file(p));
    if (base != 0) SB_RETURN_IF_ERROR(sync_dir(opt_.dir + "/snap"));
    SB_RETURN_IF_ERROR(sync_dir(opt_.dir + "/wal"));
  }
  // New records go to a fresh segment after everything replayed.
  return open_segment(segs.empty() ? std::max<uint64_t>(base, 1) : last + 1);
}

void Wal::append(const WalRecord& r) {
  encode(r, &buf_);
  ++pending_n_;
}

Status Wal::commit() {
  if (fd_ < 0) return Status::FailedPrecondition("wal: not open (recover() was not called, or closed)");
  if (!broken_.ok()) return broken_;
  if (!buf_.empty()) {
    Status w = write_all(fd_, buf_.data(), buf_.size(), "wal");
    if (!w.ok()) {
      // Part of the buffer may be in the file: cut it back to the last whole
      // commit so no later record follows a torn one. The records are
      // dropped (their ops fail; the owner stops on kIo).
      const bool cut = ::ftruncate(fd_, off_t(seg_bytes_)) == 0;
      buf_.clear();
      pending_n_ = 0;
      if (cut) return Status::Io(w.message());
      // A torn tail stays: nothing may be appended after it. The group's
      // records before the tear are whole and replay at the restart: its
      // ops' outcome is unknown, not failed (a retry with the same request
      // id after the restart gets the log's answer).
      broken_ = Status::Io(w.message() + "; cutting the segment back failed: " + std::strerror(errno));
      return Status::Io("outcome unknown: " + broken_.message() +
                        ": the group's records written before the error take effect when the owner restarts");
    }
    seg_bytes_ += buf_.size();
    stats_.bytes += buf_.size();
    stats_.records += pending_n_;
    since_snap_ += pending_n_;
    ++stats_.commits;
    buf_.clear();
    pending_n_ = 0;
    dirty_ = true;
  }
  if (!dirty_) return Status::Ok();
  bool sync = false;
  if (opt_.fsync == FsyncPolicy::kBatch) {
    sync = true;
  } else if (opt_.fsync == FsyncPolicy::kInterval) {
    sync = now_ns() - last_sync_ns_ >= uint64_t(opt_.fsync_interval_ms) * 1000000ULL;
  }
  if (sync) {
    if ((opt_.sync_fn ? opt_.sync_fn(fd_) : ::fdatasync(fd_)) != 0) {
      // What reached the disk is unknown now (the kernel may have dropped
      // the dirty pages: a second fdatasync would "succeed"): no more
      // commits. The records are in the file as far as this process can
      // tell and replay at the restart if the disk kept them: the ops'
      // outcome is unknown, not failed. Later calls just fail.
      broken_ = Status::Io(std::string("wal: fdatasync: ") + std::strerror(errno));
      return Status::Io("outcome unknown: " + broken_.message() +
                        ": the group's records may have reached the disk and then take effect when the owner restarts");
    }
    ++stats_.syncs;
    last_sync_ns_ = now_ns();
    dirty_ = false;
  }
  return Status::Ok();
}

Status Wal::snapshot(
    const std::function<void(const std::function<void(const WalRecord&)>&)>& each) {
  if (fd_ < 0) return Status::FailedPrecondition("wal: not open (recover() was not called, or closed)");
  // A broken log keeps its torn or unsynced tail in the current segment:
  // opening the next segment would leave that tail in a segment that is
  // not the last, and every restart would be refused.
  if (!broken_.ok()) return broken_;
  if (pending_n_ != 0) return Status::FailedPrecondition("wal: snapshot with pending records");
  if (dirty_ && opt_.fsync != FsyncPolicy::kNone && ::fdatasync(fd_) != 0) {
    broken_ = Status::Io(std::string("wal: fdatasync: ") + std::strerror(errno));
    return broken_;
  }
  const uint64_t next = seg_ + 1;
  SB_RETURN_IF_ERROR(open_segment(next));
  std::string b;
  put64(&b, kSnapMagic);
  put64(&b, 0);
  uint64_t count = 0;
  each([&](const WalRecord& r) {
    WalRecord p = r;
    if (p.type == WalRecord::kDel) p.type = WalRecord::kPut;  // a snapshot holds the state: PUTs (+ TEID, DONE)
    p.undo = false;
    encode(p, &b);
    ++count;
  });
  std::memcpy(b.data() + 8, &count, 8);
  put64(&b, checksum64(b.data(), b.size()));
  const std::string final_path = opt_.dir + "/snap/" + seg_name(next) + ".snap";
  const std::string tmp = final_path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);  // as the segments
  if (fd < 0) return Status::Io(tmp + ": open");
  Status st = write_all(fd, b.data(), b.size(), tmp);
  if (st.ok() && opt_.fsync != FsyncPolicy::kNone && ::fsync(fd) != 0) st = Status::Io(tmp + ": fsync");
  ::close(fd);
  if (st.ok() && ::rename(tmp.c_str(), final_path.c_str()) != 0) st = Status::Io(final_path + ": rename");
  if (!st.ok()) {
    // The partial file would stay for good (the next snapshot has another
    // number): after a disk-full failure it would keep the disk full.
    ::unlink(tmp.c_str());
    return st;
  }
  if (opt_.fsync != FsyncPolicy::kNone) SB_RETURN_IF_ERROR(sync_dir(opt_.dir + "/snap"));
  // Truncate: segments and snapshots older than this one are no longer needed.
  // Best effort: what a failed listing leaves is removed by a later snapshot.
  std::vector<uint64_t> old;
  (void)list_numbered(opt_.dir + "/wal", ".log", &old);
  for (uint64_t s : old)
    if (s < next) ::unlink((opt_.dir + "/wal/" + seg_name(s) + ".log").c_str());
  (void)list_numbered(opt_.dir + "/snap", ".snap", &old);
  for (uint64_t s : old)
    if (s < next) ::unlink((opt_.dir + "/snap/" + seg_name(s) + ".snap").c_str());
  since_snap_ = 0;
  dirty_ = false;
  ++stats_.snapshots;
  return Status::Ok();
}

}  // namespace sb::rib
