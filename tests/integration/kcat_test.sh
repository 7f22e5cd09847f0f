#!/usr/bin/env bash
# kcat, a stock Kafka client, sees the dev broker as a Kafka cluster: three brokers, the
# five topics, and the result events the sample tasks produced (run after them); and a
# submission kcat produces to the submit topic becomes a task that runs to its result.
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

# A submission produced by kcat (key = user_id) is stored by the dispatcher and run.
key="kcat-$(date +%s%N)"
printf '{"user_id":"kcat-user","text":"bench: steps=1 calls=1","idempotency_key":"%s"}\n' "$key" |
  timeout 20 kcat -b "$AGENTFLEET_KAFKA_BOOTSTRAP" -P -t agent.tasks.submit -k kcat-user
status=""
for _ in $(seq 1 600); do
  status=$(psql "$AGENTFLEET_PG_URL" -X -At -c \
    "SELECT status || ' ' || coalesce(result_type, '') FROM tasks WHERE idempotency_key = '$key'")
  [[ "$status" == "succeeded action_completed" ]] && break
  sleep 0.1
done
if [[ "$status" != "succeeded action_completed" ]]; then
  echo "the task kcat submitted did not succeed within 60 s (status: '${status:-not stored}')"
  exit 1
fi
# The worker publishes the result event after the row says succeeded (or, if that publish
# failed, a relay 10 s later): read the topic until it is there (30 tries, 1 s apart).
task_id=$(psql "$AGENTFLEET_PG_URL" -X -At -c "SELECT task_id FROM tasks WHERE idempotency_key = '$key'")
found=""
for _ in $(seq 1 30); do
  results=$(timeout 30 kcat -b "$AGENTFLEET_KAFKA_BOOTSTRAP" -C -t agent.tasks.results -e -q -f '%k %s\n')
  if grep -q "^kcat-user .*\"task_id\":\"$task_id\".*\"status\":\"succeeded\"" <<<"$results"; then
    found=yes
    break
  fi
  sleep 1
done
[[ -n "$found" ]] || { echo "no result event for the task kcat submitted ($task_id)"; exit 1; }
echo "kcat: 3 brokers, 5 topics, $count result events; a submission produced by kcat ran to its result"
