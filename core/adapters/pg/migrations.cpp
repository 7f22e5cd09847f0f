#include "core/adapters/pg/migrations.hpp"

#include <pqxx/pqxx>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <thread>
#include <utility>

namespace agentfleet::embedded {
const std::vector<std::pair<std::string_view, std::string_view>>& migrations();
}

namespace agentfleet::pg {

namespace {
// "agentfleet" in ASCII; any constant shared by every migrating process works.
constexpr long long kMigrationLock = 0x6167656e74666c74LL;

constexpr std::string_view kNoTransaction = "-- agentfleet: no-transaction";

std::string_view trimmed(std::string_view line) {
  const auto begin = line.find_first_not_of(" \t\r");
  if (begin == std::string_view::npos)
    return {};
  const auto end = line.find_last_not_of(" \t\r");
  return line.substr(begin, end - begin + 1);
}

// Runs `once` until it does not time out on a lock (55P03), backing off 250 ms doubling to
// 5 s, for at most lock_timeout_s; counts the retries.
void with_lock_retries(const std::string& version, int lock_timeout_s,
                       std::chrono::milliseconds statement_lock_timeout, int& retries,
                       const std::function<void()>& once) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(lock_timeout_s);
  for (int attempt = 0;; ++attempt) {
    try {
      once();
      return;
    } catch (const pqxx::sql_error& e) {
      if (e.sqlstate() != "55P03")  // lock_not_available
        throw std::runtime_error("migration " + version + " failed: " + e.what());
    } catch (const std::exception& e) {
      throw std::runtime_error("migration " + version + " failed: " + e.what());
    }
    const auto backoff = std::min(std::chrono::milliseconds(250) * (1 << std::min(attempt, 5)),
                                  std::chrono::milliseconds(5000));
    if (std::chrono::steady_clock::now() + backoff >= give_up) {
      throw std::runtime_error(
          "migration " + version + " could not take its locks within " +
          std::to_string(lock_timeout_s) + " s (each wait bounded to " +
          std::to_string(statement_lock_timeout.count()) +
          " ms): other sessions hold them; run it again when the tables are quieter");
    }
    ++retries;
    std::this_thread::sleep_for(backoff);
  }
}

}  // namespace

std::optional<std::vector<std::string>> no_transaction_statements(std::string_view sql) {
  const auto first_end = sql.find('\n');
  if (trimmed(sql.substr(0, first_end)) != kNoTransaction)
    return std::nullopt;
  if (sql.find("$$") != std::string_view::npos) {
    throw std::invalid_argument(
        "a no-transaction migration is split at the ';' ending a line and cannot hold "
        "dollar-quoted bodies ($$)");
  }
  std::vector<std::string> statements;
  std::string current;
  std::size_t at = 0;
  while (at < sql.size()) {
    auto end = sql.find('\n', at);
    if (end == std::string_view::npos)
      end = sql.size();
    const std::string_view line = trimmed(sql.substr(at, end - at));
    at = end + 1;
    if (line.empty() || line.substr(0, 2) == "--")
      continue;
    if (!current.empty())
      current += '\n';
    current += line;
    if (line.back() == ';') {
      current.pop_back();
      statements.push_back(std::move(current));
      current.clear();
    }
  }
  if (!current.empty())
    statements.push_back(std::move(current));  // the last one may go without its ';'
  return statements;
}

std::string migration_checksum(std::string_view text) {
  // FNV-1a 64's step with the basis this migrator has always used (recorded checksums
  // depend on it; it is not the published offset basis).
  std::uint64_t hash = 1469598103934665603ULL;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 1099511628211ULL;
  }
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(hash));
  return buf;
}

std::vector<EmbeddedMigration> embedded_migrations() {
  auto files = embedded::migrations();
  std::sort(files.begin(), files.end());
  std::vector<EmbeddedMigration> out;
  out.reserve(files.size());
  for (const auto& [name, sql] : files)
    out.push_back(EmbeddedMigration{std::string(name), migration_checksum(sql)});
  return out;
}

bool is_earlier_text(std::string_view version, std::string_view checksum) {
  // The texts as first applied (tests/pg/earlier_migrations keeps them).
  static constexpr std::pair<std::string_view, std::string_view> kEarlier[] = {
      {"0001_init.sql", "22256644dae1c707"},
      {"0003_fair_scheduler.sql", "6700b802a00c5d47"},
      {"0004_strategies.sql", "4be03e83fbc50ee8"},
  };
  return std::any_of(std::begin(kEarlier), std::end(kEarlier), [&](const auto& earlier) {
    return earlier.first == version && earlier.second == checksum;
  });
}

MigrationReport migrate(const std::string& connection_url, int lock_timeout_s,
                        std::chrono::milliseconds statement_lock_timeout) {
  std::vector<MigrationFile> files;
  for (const auto& [name, sql] : embedded::migrations())
    files.push_back(MigrationFile{std::string(name), std::string(sql)});
  return migrate_files(connection_url, std::move(files), lock_timeout_s, statement_lock_timeout);
}

MigrationReport migrate_files(const std::string& connection_url, std::vector<MigrationFile> files,
                              int lock_timeout_s,
                              std::chrono::milliseconds statement_lock_timeout) {
  pqxx::connection connection(connection_url);
  {
    pqxx::nontransaction tx(connection);
    tx.exec0("SET lock_timeout = '" + std::to_string(lock_timeout_s) + "s'");
    // pg_advisory_lock waits without a deadline, so poll the try-variant within the bound.
    bool locked = false;
    for (int waited_ms = 0; waited_ms <= lock_timeout_s * 1000; waited_ms += 100) {
      locked = tx.exec_params1("SELECT pg_try_advisory_lock($1)", kMigrationLock)[0].as<bool>();
      if (locked)
        break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (!locked)
      throw std::runtime_error("another process holds the migration lock");
    tx.exec0(
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        " version text PRIMARY KEY, checksum text NOT NULL,"
        " applied_at timestamptz NOT NULL DEFAULT now())");
  }

  std::sort(files.begin(), files.end(),
            [](const MigrationFile& a, const MigrationFile& b) { return a.version < b.version; });
  MigrationReport report;
  const std::string timeout = "'" + std::to_string(statement_lock_timeout.count()) + "ms'";
  const auto record = [](const std::string& version, const std::string& sum, pqxx::work& tx) {
    tx.exec_params0("INSERT INTO schema_migrations (version, checksum) VALUES ($1, $2)", version,
                    sum);
  };
  for (const MigrationFile& file : files) {
    const std::string& version = file.version;
    const std::string sum = migration_checksum(file.sql);
    {
      pqxx::work tx(connection);
      auto existing =
          tx.exec_params("SELECT checksum FROM schema_migrations WHERE version = $1", version);
      tx.commit();
      if (!existing.empty()) {
        const auto recorded = existing[0][0].as<std::string>();
        if (recorded != sum && !is_earlier_text(version, recorded)) {
          throw std::runtime_error(
              "migration " + version +
              " was changed after it was applied; add a new migration instead");
        }
        report.already.push_back(version);
        continue;
      }
    }
    std::optional<std::vector<std::string>> statements;
    try {
      statements = no_transaction_statements(file.sql);
    } catch (const std::exception& e) {
      throw std::runtime_error("migration " + version + " cannot be run: " + e.what());
    }
    if (statements) {
      // Outside a transaction (CREATE INDEX CONCURRENTLY cannot run inside one), a statement
      // at a time, each retried alone on a lock timeout: the file's statements must be safe
      // to run again (IF NOT EXISTS; an index build that failed leaves an invalid index,
      // so such a file drops it first), since a failure part-way runs the file again.
      for (std::size_t i = 0; i < statements->size(); ++i) {
        with_lock_retries(version + " (statement " + std::to_string(i + 1) + ")", lock_timeout_s,
                          statement_lock_timeout, report.lock_retries, [&] {
                            pqxx::nontransaction tx(connection);
                            tx.exec0("SET lock_timeout = " + timeout);
                            try {
                              tx.exec0((*statements)[i]);
                            } catch (...) {
                              tx.exec0("RESET lock_timeout");
                              throw;
                            }
                            tx.exec0("RESET lock_timeout");
                          });
      }
      pqxx::work tx(connection);
      record(version, sum, tx);
      tx.commit();
    } else {
      with_lock_retries(version, lock_timeout_s, statement_lock_timeout, report.lock_retries, [&] {
        pqxx::work tx(connection);
        tx.exec0("SET LOCAL lock_timeout = " + timeout);
        tx.exec0(file.sql);
        record(version, sum, tx);
        tx.commit();
      });
    }
    report.applied.push_back(version);
  }
  pqxx::nontransaction unlock(connection);
  unlock.exec_params("SELECT pg_advisory_unlock($1)", kMigrationLock);
  return report;
}

}  // namespace agentfleet::pg
