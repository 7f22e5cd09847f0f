#!/usr/bin/env bash
# kcat, a stock Kafka client, sees the dev broker as a Kafka cluster: three brokers, the
# five topics, and the result events the sample tasks produced (run after them).
set -euo pipefail
set -a
# shellcheck disable=SC1091
source "$AGENTFLEET_TEST_RUN_DIR/env"
set +a
metadata=$(timeout 20 kcat -b "$AGENTFLEET_KAFKA_BOOTSTRAP" -L)
grep -q "3 brokers" <<<"$metadata" || { echo "expected 3 brokers:"; echo "$metadata"; exit 1; }
for topic in agent.tasks.submit agent.tasks.dispatch agent.tasks.results agent.tasks.events agent.tasks.dlq; do
  grep -q "topic \"$topic\"" <<<"$metadata" || { echo "topic $topic missing:"; echo "$metadata"; exit 1; }
done
events=$(timeout 30 kcat -b "$AGENTFLEET_KAFKA_BOOTSTRAP" -C -t agent.tasks.results -e -q -f '%k %s\n')
count=$(grep -c '"task_id"' <<<"$events" || true)
if ((count < 6)); then
  echo "expected the sample tasks' result events, got $count:"
  echo "$events"
  exit 1
fi
echo "kcat: 3 brokers, 5 topics, $count result events"
