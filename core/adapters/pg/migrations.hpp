#pragma once
// Applies the numbered SQL files of adapters/pg/migrations (embedded in the binary) in
// order, each in its own transaction (or, marked so, a statement at a time outside one),
// recording them in schema_migrations. Idempotent and
// safe to run from several processes at once: a session advisory lock serializes runs.
// A recorded migration whose text has changed is refused (checksums), except the earlier
// texts of the three migrations that were edited before that rule held (is_earlier_text).

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace agentfleet::pg {

struct MigrationReport {
  std::vector<std::string> applied;  // file names applied by this run
  std::vector<std::string> already;  // file names found applied
  int lock_retries = 0;              // files run again after a lock wait timed out
};

// Throws std::runtime_error with the failing file's name on any problem.
// Each file's statements wait at most `statement_lock_timeout` for a lock, so a migration
// never holds a queue of every other query on a busy table behind it for long; a file whose
// wait times out is rolled back and run again after a backoff (250 ms doubling, at most
// 5 s), for at most `lock_timeout_s` in all (the same bound applies to the migration lock).
MigrationReport migrate(
    const std::string& connection_url, int lock_timeout_s = 60,
    std::chrono::milliseconds statement_lock_timeout = std::chrono::milliseconds(5000));

// As migrate(), with these files instead of the embedded ones (tests).
struct MigrationFile {
  std::string version;  // the file name; files apply in its order
  std::string sql;
};
MigrationReport migrate_files(
    const std::string& connection_url, std::vector<MigrationFile> files, int lock_timeout_s = 60,
    std::chrono::milliseconds statement_lock_timeout = std::chrono::milliseconds(5000));

// A file whose first line is "-- agentfleet: no-transaction" runs outside a transaction (what
// CREATE INDEX CONCURRENTLY needs), its statements one at a time: split at each ';' that
// ends a line, comment lines dropped. nullopt for any other file (one transaction). Throws
// std::invalid_argument for such a file with a dollar-quoted body, which the split would cut.
std::optional<std::vector<std::string>> no_transaction_statements(std::string_view sql);

// What schema_migrations records of a migration's text (an FNV-1a 64 hash, hex): it detects an
// edited migration; it is not a security boundary.
std::string migration_checksum(std::string_view text);

struct EmbeddedMigration {
  std::string version;   // the file name, e.g. "0004_strategies.sql"
  std::string checksum;  // migration_checksum of its text
};
// The migrations built into this binary, in the order they apply.
std::vector<EmbeddedMigration> embedded_migrations();

// Earlier texts of migrations that were edited after they had landed (0001, 0003, 0004), by
// checksum: a database that applied one is not refused; migration 0009 gives it what the
// edit added. No migration is edited any more (tests/unit/migrations_pin_test.cpp).
bool is_earlier_text(std::string_view version, std::string_view checksum);

}  // namespace agentfleet::pg
