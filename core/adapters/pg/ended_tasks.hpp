#pragma once
// Tasks that end without a worker's finish (cancelled before they ran, out of budget,
// expired in the queue, given up by recovery): their rows and their result events, written
// in the caller's transaction so the announcement is exactly as durable as the state.

#include <pqxx/pqxx>

#include <optional>
#include <string>
#include <vector>

#include "core/domain/task.hpp"
#include "core/ports/scheduler_store.hpp"

namespace agentfleet::pg {

// The RETURNING list announce_ended() reads: the columns a result event is built from.
extern const char* const kEndedColumns;

// Writes one result event per row (selected with kEndedColumns) into the outbox.
void announce_ended(pqxx::work& tx, const pqxx::result& rows, const std::string& results_topic);

using ports::Ending;

// Ends the given tasks that are still staged (a sealed batch's, moving into the queue),
// queued or dispatched (others are left alone) and announces them. Returns the ids ended.
// The caller holds their row locks or accepts that a task started meanwhile is skipped.
std::vector<std::string> end_unstarted(pqxx::work& tx, const std::vector<std::string>& task_ids,
                                       const Ending& ending, const std::string& results_topic);

// A JSON array of strings (for `= ANY(...)` parameters).
std::string json_string_array(const std::vector<std::string>& items);

}  // namespace agentfleet::pg
