// The autotune cache (torch.backends.cudnn.benchmark = True): one outcome per problem
// key, plus the record of how it was reached. Backend-neutral (no CUDA, no ATen), so
// that the Python module (ops.cpp) can report it in every build; the CUDA op glue
// (cuda/convt2d_cuda.cpp) times the candidates and stores the outcome here.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace convt2d {
namespace tuning {

// The choice "run what the heuristics pick". A problem whose candidates all failed, or
// where no candidate beat the heuristic's by more than the timing noise, caches this.
constexpr int kHeuristic = -1;

struct CandidateTime {
  std::string name;
  double ms = -1;        // median time (max of GPU and host time per run); < 0: skipped
  std::string skipped;   // why it was skipped (its error), empty if timed
};

struct Record {
  std::string key;       // op, problem, dtype, math mode, layout, bias, device
  std::string chosen;    // the chosen candidate's name
  std::vector<CandidateTime> candidates;
};

// The cached choice for `key`: true and *choice set, or false (not tuned yet). A hit
// counts in stats().cache_hits, a miss in stats().cache_misses (a miss is followed by a
// tuning, except inside a CUDA graph capture).
bool lookup(const std::string& key, int* choice);
// Stores the outcome of one tuning (counts in stats().tunings); a key already stored
// (another thread tuned it first) keeps its first outcome.
void store(const std::string& key, int choice, Record record);

struct Stats {
  int64_t tunings = 0;            // problems timed (once per problem, unless two threads race)
  int64_t cache_hits = 0;         // calls that reused a cached choice
  int64_t cache_misses = 0;       // calls that found no cached choice
  int64_t candidate_failures = 0; // candidates skipped during tuning (errors)
  int64_t entries = 0;            // problems in the cache
};
Stats stats();
std::vector<Record> records();
// Forgets every cached choice and zeroes the counters (tests; a new tuning then times again).
void reset();

}  // namespace tuning
}  // namespace convt2d
