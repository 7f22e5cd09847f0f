#!/usr/bin/env python3
"""Checks of the Grafana dashboard and the alert rules that ship with the Helm chart.

  dashboard_check.py static DASHBOARD RULES METRICS_README
      No Prometheus needed: the dashboard is valid JSON that Grafana can import with a
      Prometheus data source chosen at import (${datasource}); every panel has queries;
      ids and titles are unique; queries use only known Grafana variables; and every
      agentfleet_*/process_* metric named by a panel or an alert is in the metrics README.

  dashboard_check.py wait-targets PROMETHEUS_URL AFTER_EPOCH TIMEOUT_S
      Waits until every scrape target is up and was scraped after AFTER_EPOCH.

  dashboard_check.py live PROMETHEUS_URL DASHBOARD RULES TIMEOUT_S
      Against a Prometheus that scraped the fleet and loaded RULES: every panel's every
      query (Grafana variables replaced by concrete values) evaluates without error and
      returns data that is not only NaN, and names only metrics the fleet exports; every
      alert rule names only exported metrics and evaluates with health "ok".

Only the Python standard library is used. Exit status 1 lists every problem found, each
naming its panel (or alert).
"""
import json
import math
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

METRIC_RE = re.compile(r"\b((?:agentfleet|process)_[a-zA-Z0-9_]+)\b")
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
# Grafana variables a query may use; anything else is a typo or an undeclared variable.
GRAFANA_BUILTINS = {"__rate_interval", "__interval", "__range"}


def panels_of(dashboard):
    """Every panel, including those inside collapsed rows, in order."""
    for panel in dashboard.get("panels", []):
        yield panel
        for inner in panel.get("panels", []) or []:
            yield inner


def queries_of(dashboard):
    """(panel title, refId, expr) for every query target."""
    for panel in panels_of(dashboard):
        if panel.get("type") == "row":
            continue
        for target in panel.get("targets", []):
            yield panel.get("title", "?"), target.get("refId", "?"), target.get("expr", "")


def variables_in(expr):
    return set(re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", expr))


def metrics_in(text):
    return set(METRIC_RE.findall(text))


def alert_exprs(rules_text):
    """(alert name, expr) from a rule file, read without a YAML library: every rule is
    `- alert: NAME` followed by `expr: ONE LINE` or `expr: |` and an indented block."""
    out = []
    lines = rules_text.splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"\s*- alert:\s*(\S+)", lines[i])
        if not m:
            i += 1
            continue
        name = m.group(1)
        i += 1
        while i < len(lines) and not re.match(r"\s*expr:", lines[i]):
            i += 1
        if i == len(lines):
            out.append((name, ""))
            break
        head = lines[i].split("expr:", 1)[1].strip()
        indent = len(lines[i]) - len(lines[i].lstrip())
        i += 1
        if head in ("|", ">", "|-", ">-"):
            block = []
            while i < len(lines) and (not lines[i].strip() or
                                      len(lines[i]) - len(lines[i].lstrip()) > indent):
                block.append(lines[i].strip())
                i += 1
            head = " ".join(block)
        out.append((name, head))
    return out


def base_name(metric):
    for suffix in HISTOGRAM_SUFFIXES:
        if metric.endswith(suffix):
            return metric[: -len(suffix)]
    return metric


def static(dashboard_path, rules_path, readme_path):
    problems = []
    try:
        with open(dashboard_path, encoding="utf-8") as f:
            dashboard = json.load(f)
    except (OSError, ValueError) as e:
        return [f"{dashboard_path}: not valid JSON: {e}"]
    for key in ("uid", "title", "panels", "templating", "schemaVersion"):
        if key not in dashboard:
            problems.append(f"dashboard: no '{key}'")
    variables = {v.get("name"): v for v in dashboard.get("templating", {}).get("list", [])}
    ds = variables.get("datasource")
    if not ds or ds.get("type") != "datasource" or ds.get("query") != "prometheus":
        problems.append("dashboard: no 'datasource' variable of type datasource (prometheus)")
    known_vars = set(variables) | GRAFANA_BUILTINS
    with open(readme_path, encoding="utf-8") as f:
        documented = metrics_in(f.read())
    ids, titles = {}, {}
    for panel in panels_of(dashboard):
        title = panel.get("title", "?")
        if panel.get("id") in ids:
            problems.append(f"panel '{title}': id {panel.get('id')} also used by "
                            f"'{ids[panel.get('id')]}'")
        ids[panel.get("id")] = title
        if panel.get("type") == "row":
            continue
        if title in titles:
            problems.append(f"panel '{title}': title used twice")
        titles[title] = True
        if panel.get("datasource", {}).get("uid") != "${datasource}":
            problems.append(f"panel '{title}': datasource is not ${{datasource}}")
        targets = panel.get("targets", [])
        if not targets:
            problems.append(f"panel '{title}': no queries")
        for target in targets:
            ref, expr = target.get("refId", "?"), target.get("expr", "")
            if not expr.strip():
                problems.append(f"panel '{title}' query {ref}: empty expr")
            if target.get("datasource", {}).get("uid") != "${datasource}":
                problems.append(f"panel '{title}' query {ref}: datasource is not ${{datasource}}")
            for var in variables_in(expr) - known_vars:
                problems.append(f"panel '{title}' query {ref}: unknown variable ${var}")
            for metric in metrics_in(expr):
                if base_name(metric) not in documented and metric not in documented:
                    problems.append(f"panel '{title}' query {ref}: {metric} is not in the "
                                    "metrics README")
    with open(rules_path, encoding="utf-8") as f:
        rules = alert_exprs(f.read())
    if not rules:
        problems.append(f"{rules_path}: no alert rules found")
    for name, expr in rules:
        if not expr:
            problems.append(f"alert {name}: no expr")
        for metric in metrics_in(expr):
            if base_name(metric) not in documented and metric not in documented:
                problems.append(f"alert {name}: {metric} is not in the metrics README")
    n_queries = sum(1 for _ in queries_of(dashboard))
    print(f"dashboard: {len(titles)} panels, {n_queries} queries; {len(rules)} alert rules; "
          "static checks done")
    return problems


# ---------------------------------------------------------------- against Prometheus


def get(base, path, params=None, timeout=10):
    url = base.rstrip("/") + path
    if params:
        url += "?" + urllib.parse.urlencode(params, doseq=True)
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return json.load(response)
    except urllib.error.HTTPError as e:
        body = e.read().decode("utf-8", "replace")
        try:
            return json.loads(body)
        except ValueError:
            return {"status": "error", "error": f"HTTP {e.code}: {body[:300]}"}


def wait_targets(base, after, timeout_s):
    deadline = time.time() + timeout_s
    last = "no answer"
    while time.time() < deadline:
        try:
            active = get(base, "/api/v1/targets", {"state": "active"})["data"]["activeTargets"]
            pending = [t["scrapeUrl"] + " (" + t["health"] + ", " + t.get("lastError", "") + ")"
                       for t in active
                       if t["health"] != "up" or
                       parse_time(t["lastScrape"]) <= after]
            if active and not pending:
                return []
            last = "; ".join(pending) or "no targets"
        except (OSError, KeyError, ValueError) as e:
            last = str(e)
        time.sleep(0.25)
    return [f"targets not scraped after {after:.0f} within {timeout_s} s: {last}"]


def parse_time(text):
    """RFC 3339 with nanoseconds (as Prometheus writes it) -> epoch seconds."""
    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)", text)
    if not m:
        return 0.0
    from datetime import datetime
    offset = "+00:00" if m.group(3) == "Z" else m.group(3)
    whole = datetime.fromisoformat(m.group(1) + offset).timestamp()
    return whole + float(m.group(2) or 0)


def grafana_regex_escape(value):
    # What Grafana does to a multi-value variable's values inside a Prometheus regex.
    return re.sub(r"([\\^$*+?.()|{}\[\]])", r"\\\\\1", value)


def substitute(expr, values):
    def replace(m):
        name = m.group(1) or m.group(2)
        return values.get(name, m.group(0))
    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::[a-z]+)?\}|\$([A-Za-z_][A-Za-z0-9_]*)",
                  replace, expr)


def has_data(result):
    kind, data = result["resultType"], result["result"]
    if kind == "scalar":
        samples = [data[1]]
    elif kind == "vector":
        samples = [s["value"][1] for s in data]
    elif kind == "matrix":
        samples = [v[1] for s in data for v in s["values"]]
    else:
        samples = []
    numbers = [float(s) for s in samples]
    return len(numbers), any(not math.isnan(x) for x in numbers)


def live(base, dashboard_path, rules_path, timeout_s):
    problems = []
    with open(dashboard_path, encoding="utf-8") as f:
        dashboard = json.load(f)
    with open(rules_path, encoding="utf-8") as f:
        rules = alert_exprs(f.read())

    exported = set(get(base, "/api/v1/label/__name__/values")["data"])
    jobs = get(base, "/api/v1/label/job/values",
               {"match[]": "agentfleet_db_pool_connections"})["data"]
    if not jobs:
        return ["no job exports agentfleet_db_pool_connections (the job variable is empty)"]
    build = get(base, "/api/v1/status/runtimeinfo")["data"]
    start = parse_time(build["startTime"])
    # $__rate_interval: a window over everything this Prometheus has scraped, so a rate
    # sees the whole workload (Grafana would pick it from the time range and scrape interval).
    window = f"{int(time.time() - start) + 15}s"
    values = {
        "job": "(" + "|".join(grafana_regex_escape(j) for j in sorted(jobs)) + ")",
        "__rate_interval": window,
        "__interval": "15s",
        "__range": window,
    }
    print(f"job = {values['job']}, $__rate_interval = {window}")

    for title, ref, expr in queries_of(dashboard):
        query = substitute(expr, values)
        where = f"panel '{title}' query {ref}"
        left = variables_in(query)
        if left:
            problems.append(f"{where}: variables left after substitution: {sorted(left)}")
            continue
        for metric in sorted(metrics_in(query) - exported):
            problems.append(f"{where}: {metric} is not exported by the fleet")
        answer = get(base, "/api/v1/query", {"query": query})
        if answer.get("status") != "success":
            problems.append(f"{where}: query error: {answer.get('error')} ({query})")
            continue
        count, real = has_data(answer["data"])
        if count == 0:
            problems.append(f"{where}: no data ({query})")
        elif not real:
            problems.append(f"{where}: only NaN ({query})")
        else:
            print(f"ok   {count:3d} series  {title} [{ref}]")

    for name, expr in rules:
        for metric in sorted(metrics_in(expr) - exported):
            problems.append(f"alert {name}: {metric} is not exported by the fleet")

    # Every rule evaluated at least once, without error.
    deadline = time.time() + timeout_s
    while True:
        groups = get(base, "/api/v1/rules")["data"]["groups"]
        loaded = {r["name"]: r for g in groups for r in g["rules"]}
        pending = [n for n, _ in rules if n not in loaded or loaded[n]["health"] == "unknown"]
        if not pending or time.time() > deadline:
            break
        time.sleep(0.25)
    for name, _ in rules:
        rule = loaded.get(name)
        if rule is None:
            problems.append(f"alert {name}: not loaded by Prometheus")
        elif rule["health"] != "ok":
            problems.append(f"alert {name}: health {rule['health']}: {rule.get('lastError')}")
    firing = sorted(n for n, r in loaded.items() if r.get("state") == "firing")
    print(f"alert rules: {len(loaded)} loaded, evaluating; firing now: {firing or 'none'}")
    return problems


def main(argv):
    sys.stdout.reconfigure(line_buffering=True)  # in order with the caller's log lines
    if len(argv) >= 2 and argv[1] == "static" and len(argv) == 5:
        problems = static(argv[2], argv[3], argv[4])
    elif len(argv) >= 2 and argv[1] == "wait-targets" and len(argv) == 5:
        problems = wait_targets(argv[2], float(argv[3]), float(argv[4]))
    elif len(argv) >= 2 and argv[1] == "live" and len(argv) == 6:
        problems = live(argv[2], argv[3], argv[4], float(argv[5]))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    for problem in problems:
        print("FAIL " + problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
