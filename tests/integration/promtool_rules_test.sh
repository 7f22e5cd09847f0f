#!/usr/bin/env bash
# The Helm chart's alert rules are valid (`promtool check rules`) and pass their unit tests
# (`promtool test rules`): each alert fires in one case and stays quiet in another.
#   promtool_rules_test.sh DIR   (helm/agentfleet/files/prometheus)
set -euo pipefail
dir=${1:?usage: promtool_rules_test.sh DIR}
command -v promtool >/dev/null || { echo "promtool is missing (tools/setup installs prometheus)" >&2; exit 1; }
promtool check rules "$dir/alerts.yaml"
# rule_files in the test file are relative to it.
cd "$dir"
promtool test rules alerts_test.yaml
