#pragma once
// A task row as codec::TaskRow: the columns of the fragment `task_row` (sql/submission.sql),
// which every read of a task the API shows selects, read in the same order.

#include <pqxx/pqxx>

#include "core/codec/task_json.hpp"

namespace agentfleet::pg {

// The columns of `task_row` in `row`, from column `first` on; returns one past the last.
int read_task_row(const pqxx::row& row, int first, codec::TaskRow& out);
codec::TaskRow read_task_row(const pqxx::row& row, int first = 0);

}  // namespace agentfleet::pg
