#pragma once
// Applies the numbered SQL files of adapters/pg/migrations (embedded in the binary) in
// order, each in its own transaction, recording them in schema_migrations. Idempotent and
// safe to run from several processes at once: a session advisory lock serializes runs.
// A recorded migration whose text has changed is refused (checksums).

#include <string>
#include <vector>

namespace agentfleet::pg {

struct MigrationReport {
  std::vector<std::string> applied;  // file names applied by this run
  std::vector<std::string> already;  // file names found applied
};

// Throws std::runtime_error with the failing file's name on any problem.
MigrationReport migrate(const std::string& connection_url, int lock_timeout_s = 60);

}  // namespace agentfleet::pg
