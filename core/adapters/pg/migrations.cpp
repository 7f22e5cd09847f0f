#include "core/adapters/pg/migrations.hpp"

#include <pqxx/pqxx>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <iterator>
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

}  // namespace

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

  auto files = embedded::migrations();
  std::sort(files.begin(), files.end());
  MigrationReport report;
  const std::string set_lock_timeout =
      "SET LOCAL lock_timeout = '" + std::to_string(statement_lock_timeout.count()) + "ms'";
  for (const auto& [name, sql] : files) {
    const std::string version(name);
    const std::string sum = migration_checksum(sql);
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(lock_timeout_s);
    for (int attempt = 0;; ++attempt) {
      pqxx::work tx(connection);
      auto existing =
          tx.exec_params("SELECT checksum FROM schema_migrations WHERE version = $1", version);
      if (!existing.empty()) {
        const auto recorded = existing[0][0].as<std::string>();
        if (recorded != sum && !is_earlier_text(version, recorded)) {
          throw std::runtime_error(
              "migration " + version +
              " was changed after it was applied; add a new migration instead");
        }
        report.already.push_back(version);
        break;
      }
      tx.exec0(set_lock_timeout);
      try {
        tx.exec0(std::string(sql));
      } catch (const pqxx::sql_error& e) {
        if (e.sqlstate() != "55P03")  // lock_not_available
          throw std::runtime_error("migration " + version + " failed: " + e.what());
        tx.abort();
        const auto backoff = std::min(std::chrono::milliseconds(250) * (1 << std::min(attempt, 5)),
                                      std::chrono::milliseconds(5000));
        if (std::chrono::steady_clock::now() + backoff >= give_up) {
          throw std::runtime_error(
              "migration " + version + " could not take its locks within " +
              std::to_string(lock_timeout_s) + " s (each wait bounded to " +
              std::to_string(statement_lock_timeout.count()) +
              " ms): other sessions hold them; run it again when the tables are quieter");
        }
        ++report.lock_retries;
        std::this_thread::sleep_for(backoff);
        continue;
      } catch (const std::exception& e) {
        throw std::runtime_error("migration " + version + " failed: " + e.what());
      }
      tx.exec_params0("INSERT INTO schema_migrations (version, checksum) VALUES ($1, $2)", version,
                      sum);
      tx.commit();
      report.applied.push_back(version);
      break;
    }
  }
  pqxx::nontransaction unlock(connection);
  unlock.exec_params("SELECT pg_advisory_unlock($1)", kMigrationLock);
  return report;
}

}  // namespace agentfleet::pg
