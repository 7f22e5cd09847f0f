#!/usr/bin/env bash
# The Helm chart (helm/agentfleet), checked without a cluster:
#   chart_test.sh render SOURCE_DIR DISPATCHER WORKER
#     values.schema.json is up to date with schemas/config.schema.json; `helm lint` and
#     `helm template` pass with the default values and with ci/production-values.yaml; the
#     rendered manifests pass check_manifests.py; the rendered configuration passes the
#     dispatcher's and the worker's own --check-config, with the Secrets' variables set
#     (to values full of YAML syntax, which must stay plain text).
#   chart_test.sh bad-values SOURCE_DIR
#     each tests/helm/bad-values/*.yaml makes `helm template` fail with the message its
#     first line names ("# expect: TEXT").
set -euo pipefail
mode=${1:?usage: chart_test.sh render|bad-values SOURCE_DIR [DISPATCHER WORKER]}
src=${2:?usage: chart_test.sh render|bad-values SOURCE_DIR [DISPATCHER WORKER]}
chart=$src/helm/agentfleet
helm=$("$src/tools/fetch-helm")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

dummy_value() {
  case $1 in
    *SHA256) printf %s "dev-key-$1" | sha256sum | cut -d' ' -f1 ;;
    *PG_URL) echo "postgresql://agentfleet@pg.internal:5432/agentfleet?sslmode=verify-full" ;;
    # Digits with a leading zero: a string field must keep them as they are.
    *API_KEY) echo "0012345678" ;;
    # A password made of YAML syntax: substituted into a value, it must stay that value.
    *) printf '%s' "*s3cr#t: &x \"q\" \\ '$1" ;;
  esac
}

if [[ $mode == render ]]; then
  dispatcher=${3:?dispatcher binary}
  worker=${4:?worker binary}
  "$src/tools/chart-schema" --check
  echo "ok: values.schema.json matches schemas/config.schema.json"
  for values in default production; do
    args=()
    check_args=()
    if [[ $values == production ]]; then
      args=(-f "$chart/ci/production-values.yaml")
      check_args=(--monitoring)
    fi
    "$helm" lint --strict "$chart" "${args[@]}" >"$work/lint.txt" 2>&1 || { cat "$work/lint.txt" >&2; fail "helm lint ($values values)"; }
    "$helm" template agentfleet-ci "$chart" --namespace fleet "${args[@]}" >"$work/$values.yaml" 2>"$work/err.txt" \
      || { cat "$work/err.txt" >&2; fail "helm template ($values values)"; }
    echo "ok: helm lint and helm template ($values values)"
    python3 "$src/tests/helm/check_manifests.py" "$work/$values.yaml" "$chart" "$work/$values" "${check_args[@]}" \
      || fail "the manifests rendered with the $values values (above)"
    # The pods' environment: every Secret's variable gets a stand-in value; Kubernetes
    # sets HOSTNAME to the pod's name.
    env_args=(HOSTNAME=agentfleet-ci-worker-5d8f7c9b4-x2x7q)
    while IFS='=' read -r name value; do
      [[ -n $value ]] || value=$(dummy_value "$name")
      env_args+=("$name=$value")
    done <"$work/$values/env"
    for binary in "$dispatcher" "$worker"; do
      out=$(env -i PATH="$PATH" "${env_args[@]}" "$binary" --check-config --config "$work/$values/config/agentfleet.yaml" 2>&1) \
        || fail "$(basename "$binary") --check-config refused the configuration rendered with the $values values: $out"
      echo "ok: $(basename "$binary") --check-config ($values values)"
    done
    # Without a Secret's variable the programs refuse to start, naming it.
    first=${env_args[1]%%=*}
    if out=$(env -i PATH="$PATH" "${env_args[@]:0:1}" "${env_args[@]:2}" "$worker" --check-config --config "$work/$values/config/agentfleet.yaml" 2>&1); then
      fail "the worker accepted the configuration without $first"
    fi
    [[ $out == *"$first"* ]] || fail "the worker's error does not name $first: $out"
  done
  echo "ok: a missing Secret variable is named by --check-config"
elif [[ $mode == bad-values ]]; then
  count=0
  for file in "$src"/tests/helm/bad-values/*.yaml; do
    expect=$(sed -n '1s/^# expect: //p' "$file")
    [[ -n $expect ]] || fail "$file: its first line must be '# expect: TEXT'"
    if "$helm" template bad "$chart" -f "$file" >/dev/null 2>"$work/err.txt"; then
      fail "$(basename "$file"): helm template accepted it"
    fi
    grep -qF -- "$expect" "$work/err.txt" || { cat "$work/err.txt" >&2; fail "$(basename "$file"): the error does not say '$expect'"; }
    echo "ok: $(basename "$file") refused: $expect"
    count=$((count + 1))
  done
  ((count >= 8)) || fail "only $count bad-values cases ran"
else
  fail "unknown mode $mode"
fi
