// The autotune cache (common/tuning.h).
#include "common/tuning.h"

#include <mutex>
#include <unordered_map>
#include <utility>

namespace convt2d {
namespace tuning {
namespace {

struct Entry {
  int choice;
  Record record;
};

struct Cache {
  std::mutex mu;
  std::unordered_map<std::string, Entry> map;
  Stats stats;
};

// Never destroyed: the cache may be read while other static objects are torn down at
// interpreter exit, and it owns no CUDA resource.
Cache& cache() {
  static Cache* c = new Cache();
  return *c;
}

}  // namespace

bool lookup(const std::string& key, int* choice) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.map.find(key);
  if (it == c.map.end()) {
    ++c.stats.cache_misses;
    return false;
  }
  *choice = it->second.choice;
  ++c.stats.cache_hits;
  return true;
}

void store(const std::string& key, int choice, Record record) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  for (const CandidateTime& t : record.candidates)
    if (!t.skipped.empty()) ++c.stats.candidate_failures;
  ++c.stats.tunings;
  c.map.emplace(key, Entry{choice, std::move(record)});
}

Stats stats() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  Stats s = c.stats;
  s.entries = int64_t(c.map.size());
  return s;
}

std::vector<Record> records() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  std::vector<Record> out;
  out.reserve(c.map.size());
  for (const auto& kv : c.map) out.push_back(kv.second.record);
  return out;
}

void reset() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.map.clear();
  c.stats = Stats{};
}

}  // namespace tuning
}  // namespace convt2d
