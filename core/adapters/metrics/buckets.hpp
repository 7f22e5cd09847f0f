#pragma once
// Histogram bucket boundaries, in seconds, chosen for the values each histogram sees.
// Internal to core/adapters/metrics; listed in its README.

#include <vector>

namespace agentfleet::metrics::buckets {

// A whole task: a few model calls and tool calls, bounded by its timeout (30 s default,
// up to minutes).
inline const std::vector<double> kTaskDuration = {0.1, 0.25, 0.5, 1,  2,  5,   10,  15,
                                                  20,  30,   45,  60, 90, 120, 180, 300};
// Creation to claim: milliseconds when idle, hours for a batch behind a backlog.
inline const std::vector<double> kQueueWait = {0.01, 0.05, 0.1, 0.25, 0.5, 1,    2.5,  5,    15,
                                               30,   60,   120, 300,  600, 1800, 3600, 7200, 14400};
// One model HTTP attempt: 10 ms (a cache or a simulator) to the 120 s a slow reasoning
// model may take.
inline const std::vector<double> kModelRequest = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                                  2.5,  5,     10,   20,  30,   60,  120};
// One tool call: a local service answers in milliseconds; the timeout is 60 s.
inline const std::vector<double> kToolCall = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                              1,     2.5,  5,     10,   30,  60};
// Waiting for a Postgres pool thread: sub-millisecond when idle.
inline const std::vector<double> kDbQueueWait = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                 0.05,   0.1,   0.25,   0.5,   1,    2.5};
// One API request; a long poll may wait 30 s.
inline const std::vector<double> kHttpRequest = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                 0.25,  0.5,    1,     2.5,  5,     10,   30};
// One scheduler pass (a few statements in one transaction).
inline const std::vector<double> kSchedulerPass = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                   0.1,   0.25,   0.5,   1,    2.5,   5};

}  // namespace agentfleet::metrics::buckets
