#!/usr/bin/env python3
"""Checks the manifests `helm template` rendered from helm/agentfleet, without a cluster.

    check_manifests.py RENDERED.yaml CHART_DIR OUT_DIR [--monitoring]

Every document must parse as YAML and carry the chart's labels; the dispatcher and worker
Deployments must have probes on /readyz and /healthz on their metrics (operations) port, a
NetworkPolicy each (the dispatcher's API and metrics ports, the worker's metrics port),
resources, a non-root read-only
security context, anti-affinity, a termination grace above the drain grace, secrets only
through secretKeyRef; Services, PodDisruptionBudgets and the autoscaler must select or
target what exists. --monitoring: the ServiceMonitor, PrometheusRule and dashboard must be
rendered and carry the chart's files unchanged (without it, they must be absent).

Writes the configuration ConfigMap's files to OUT_DIR/config/ and the names of the
environment variables the pods get to OUT_DIR/env (NAME=literal value, or NAME= for a
Secret's), for the binaries' --check-config. Exits 1 listing every problem found.
"""
import json
import pathlib
import sys

import yaml

STANDARD_LABELS = ["helm.sh/chart", "app.kubernetes.io/name", "app.kubernetes.io/instance",
                   "app.kubernetes.io/version", "app.kubernetes.io/managed-by", "app.kubernetes.io/part-of"]
CONFIG_PATH = "/etc/agentfleet/agentfleet.yaml"
problems = []


def problem(where, text):
    problems.append(f"{where}: {text}")


def name_of(doc):
    return f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"


def selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def check_container(where, container, pod_spec, config):
    ctx = container.get("securityContext") or {}
    if ctx.get("runAsNonRoot") is not True:
        problem(where, "securityContext.runAsNonRoot is not true")
    if ctx.get("readOnlyRootFilesystem") is not True:
        problem(where, "securityContext.readOnlyRootFilesystem is not true")
    if ctx.get("allowPrivilegeEscalation") is not False:
        problem(where, "securityContext.allowPrivilegeEscalation is not false")
    if "ALL" not in ((ctx.get("capabilities") or {}).get("drop") or []):
        problem(where, "securityContext.capabilities.drop lacks ALL")
    resources = container.get("resources") or {}
    for kind, key in (("requests", "cpu"), ("requests", "memory"), ("limits", "memory")):
        if key not in (resources.get(kind) or {}):
            problem(where, f"resources.{kind}.{key} is not set")
    env = {e["name"]: e for e in container.get("env") or []}
    if (env.get("AGENTFLEET_CONFIG") or {}).get("value") != CONFIG_PATH:
        problem(where, f"AGENTFLEET_CONFIG is not {CONFIG_PATH}")
    for name, entry in env.items():
        source = entry.get("valueFrom")
        if source is not None and set(source) != {"secretKeyRef"}:
            problem(where, f"env {name} comes from {list(source)}, not a Secret")
        if source is None and any(w in name for w in ("PASSWORD", "SECRET", "TOKEN", "API_KEY", "SHA256", "PG_URL")):
            problem(where, f"env {name} looks like a secret but is a literal value")
    mounts = {m["name"]: m for m in container.get("volumeMounts") or []}
    if (mounts.get("config") or {}).get("mountPath") != "/etc/agentfleet" or not mounts["config"].get("readOnly"):
        problem(where, "the config volume is not mounted read-only at /etc/agentfleet")
    if (mounts.get("tmp") or {}).get("mountPath") != "/tmp":
        problem(where, "no writable /tmp (the root file system is read-only)")
    volumes = {v["name"]: v for v in pod_spec.get("volumes") or []}
    if "configMap" not in (volumes.get("config") or {}):
        problem(where, "the config volume is not a ConfigMap")
    return env


def check_probes(where, container):
    ports = {p["name"] for p in container.get("ports") or []}
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz"),
                        ("startupProbe", "/healthz")):
        get = (container.get(probe) or {}).get("httpGet") or {}
        if get.get("path") != path:
            problem(where, f"{probe} is not an HTTP GET of {path}")
        if get.get("port") not in ports:
            problem(where, f"{probe} uses port {get.get('port')!r}, which the container does not declare")
        # The operations port: the API port is the clients', behind its connection caps.
        if get.get("port") != "metrics":
            problem(where, f"{probe} uses port {get.get('port')!r}, not the metrics (operations) port")


def check_network_policies(policies, component):
    """One NetworkPolicy per Deployment, for ingress: the dispatcher's API and metrics
    ports, the worker's metrics port alone."""
    for role, deployment in component.items():
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        mine = [p for p in policies if selects(p["spec"]["podSelector"].get("matchLabels"), labels)]
        where = name_of(deployment)
        if len(mine) != 1:
            problem(where, f"is selected by {len(mine)} NetworkPolicies, not 1")
            continue
        spec = mine[0]["spec"]
        if "Ingress" not in (spec.get("policyTypes") or []):
            problem(name_of(mine[0]), "does not govern ingress")
        declared = {p["name"]: p["containerPort"] for c in deployment["spec"]["template"]["spec"]["containers"]
                    for p in c.get("ports") or []}
        allowed = sorted(p.get("port") for rule in spec.get("ingress") or [] for p in rule.get("ports") or [])
        wanted = sorted(declared[n] for n in (("http", "metrics") if role == "dispatcher" else ("metrics",)))
        if allowed != wanted:
            problem(name_of(mine[0]), f"admits the ports {allowed}, not {wanted}")


def check_anti_affinity(where, pod_spec, pod_labels):
    anti = (pod_spec.get("affinity") or {}).get("podAntiAffinity") or {}
    terms = [t for t in anti.get("requiredDuringSchedulingIgnoredDuringExecution") or []]
    terms += [t.get("podAffinityTerm") or {} for t in anti.get("preferredDuringSchedulingIgnoredDuringExecution") or []]
    if not any(selects((t.get("labelSelector") or {}).get("matchLabels"), pod_labels)
               and t.get("topologyKey") == "kubernetes.io/hostname" for t in terms):
        problem(where, "no pod anti-affinity across nodes for its own pods")


def main():
    args = sys.argv[1:]
    monitoring = "--monitoring" in args
    args = [a for a in args if a != "--monitoring"]
    if len(args) != 3:
        sys.exit(__doc__)
    rendered, chart, out = pathlib.Path(args[0]), pathlib.Path(args[1]), pathlib.Path(args[2])
    try:
        docs = [d for d in yaml.safe_load_all(rendered.read_text()) if d is not None]
    except yaml.YAMLError as e:
        sys.exit(f"{rendered}: not YAML: {e}")
    by_kind = {}
    for doc in docs:
        if not isinstance(doc, dict) or not doc.get("apiVersion") or not doc.get("kind") or not (doc.get("metadata") or {}).get("name"):
            problem(str(rendered), f"a document without apiVersion, kind and metadata.name: {str(doc)[:80]}")
            continue
        by_kind.setdefault(doc["kind"], []).append(doc)
        labels = doc["metadata"].get("labels") or {}
        missing = [l for l in STANDARD_LABELS if l not in labels]
        if missing:
            problem(name_of(doc), f"lacks the labels {missing}")
    if "Secret" in by_kind:
        problem("chart", "renders a Secret; secrets must only be referenced")

    # The configuration and its hook copy.
    configmaps = {d["metadata"]["name"]: d for d in by_kind.get("ConfigMap", [])}
    config_maps = [d for d in configmaps.values() if "agentfleet.yaml" in (d.get("data") or {})]
    main_config = [d for d in config_maps if "helm.sh/hook" not in (d["metadata"].get("annotations") or {})]
    if len(main_config) != 1:
        sys.exit(f"expected one configuration ConfigMap, found {len(main_config)}")
    config_data = main_config[0]["data"]
    config = yaml.safe_load(config_data["agentfleet.yaml"])
    for copy in config_maps:
        if copy is not main_config[0] and copy["data"] != config_data:
            problem(name_of(copy), "differs from the configuration ConfigMap")
    (out / "config").mkdir(parents=True, exist_ok=True)
    for file, text in config_data.items():
        (out / "config" / file).write_text(text)

    deployments = {d["metadata"]["name"]: d for d in by_kind.get("Deployment", [])}
    component = {d["spec"]["template"]["metadata"]["labels"].get("app.kubernetes.io/component"): d for d in deployments.values()}
    if set(component) != {"dispatcher", "worker"}:
        sys.exit(f"expected a dispatcher and a worker Deployment, found {sorted(map(str, component))}")
    env_seen = {}
    grace = (config.get("worker") or {}).get("shutdown_grace_s", 30)
    for role, deployment in component.items():
        where = name_of(deployment)
        spec = deployment["spec"]
        pod = spec["template"]
        pod_labels = pod["metadata"].get("labels") or {}
        pod_spec = pod["spec"]
        if not selects(spec["selector"].get("matchLabels"), pod_labels):
            problem(where, "its selector does not match its pod labels")
        if "checksum/config" not in (pod["metadata"].get("annotations") or {}):
            problem(where, "no checksum/config annotation: a configuration change would not roll the pods")
        pod_ctx = pod_spec.get("securityContext") or {}
        if pod_ctx.get("runAsNonRoot") is not True or not pod_ctx.get("runAsUser"):
            problem(where, "the pod does not run as a non-root user")
        if config_maps and (pod_spec.get("volumes") or [{}])[0].get("configMap", {}).get("name") != main_config[0]["metadata"]["name"]:
            problem(where, "does not mount the configuration ConfigMap")
        check_anti_affinity(where, pod_spec, pod_labels)
        for container in pod_spec["containers"]:
            env = check_container(f"{where} container {container['name']}", container, pod_spec, config)
            check_probes(f"{where} container {container['name']}", container)
            for name, entry in env.items():
                env_seen[name] = entry.get("value", "") if "valueFrom" not in entry else None
        termination = pod_spec.get("terminationGracePeriodSeconds")
        if role == "worker" and not (isinstance(termination, int) and termination >= grace + 15):
            problem(where, f"terminationGracePeriodSeconds {termination} leaves less than 15 s after config.worker.shutdown_grace_s {grace}")
        if role == "dispatcher":
            if spec.get("replicas", 1) < 2:
                problem(where, f"replicas {spec.get('replicas')} < 2")
            stop = ((pod_spec["containers"][0].get("lifecycle") or {}).get("preStop") or {}).get("exec", {}).get("command", [])
            pause = int(stop[1]) if len(stop) == 2 and stop[0] == "sleep" else 0
            if not (isinstance(termination, int) and termination >= pause + 10):
                problem(where, f"terminationGracePeriodSeconds {termination} leaves no time after the preStop pause")

    # Services and PDBs select existing pods, through ports the pods declare.
    for service in by_kind.get("Service", []):
        targets = [d for d in deployments.values() if selects(service["spec"].get("selector"), d["spec"]["template"]["metadata"]["labels"])]
        if len(targets) != 1:
            problem(name_of(service), f"selects {len(targets)} Deployments")
            continue
        ports = {p["name"] for c in targets[0]["spec"]["template"]["spec"]["containers"] for p in c.get("ports") or []}
        for port in service["spec"]["ports"]:
            if port.get("targetPort") not in ports:
                problem(name_of(service), f"targets port {port.get('targetPort')!r}, which its pods do not declare")
    check_network_policies(by_kind.get("NetworkPolicy", []), component)
    for pdb in by_kind.get("PodDisruptionBudget", []):
        if not any(selects(pdb["spec"]["selector"].get("matchLabels"), d["spec"]["template"]["metadata"]["labels"]) for d in deployments.values()):
            problem(name_of(pdb), "selects no Deployment")
    if len(by_kind.get("PodDisruptionBudget", [])) != 2:
        problem("chart", "expected a PodDisruptionBudget for the dispatcher and one for the worker")

    # Worker autoscaling: a ScaledObject on the worker group's lag, or an HPA on CPU.
    worker = component["worker"]
    scalers = by_kind.get("ScaledObject", []) + by_kind.get("HorizontalPodAutoscaler", [])
    if len(scalers) > 1:
        problem("chart", "both a ScaledObject and an HPA scale the workers")
    for scaler in scalers:
        if scaler["spec"]["scaleTargetRef"]["name"] != worker["metadata"]["name"]:
            problem(name_of(scaler), "does not scale the worker Deployment")
        if "replicas" in worker["spec"]:
            problem(name_of(worker), "sets replicas while an autoscaler owns them")
    for scaled in by_kind.get("ScaledObject", []):
        kafka = config.get("kafka") or {}
        trigger = scaled["spec"]["triggers"][0]
        meta = trigger["metadata"]
        if trigger["type"] != "kafka" or meta.get("topic") != (kafka.get("topics") or {}).get("dispatch", "agent.tasks.dispatch") \
                or meta.get("consumerGroup") != kafka.get("worker_group", "agentfleet-workers"):
            problem(name_of(scaled), "is not a Kafka trigger on the worker group's dispatch topic")
        ref = (trigger.get("authenticationRef") or {}).get("name")
        auths = {d["metadata"]["name"] for d in by_kind.get("TriggerAuthentication", [])}
        if meta.get("sasl") and ref is None:
            problem(name_of(scaled), "uses SASL without a TriggerAuthentication")
        if ref is not None and auths and ref not in auths:
            problem(name_of(scaled), f"refers to the TriggerAuthentication {ref}, which is not rendered")

    # The migration hook.
    jobs = by_kind.get("Job", [])
    for job in jobs:
        annotations = job["metadata"].get("annotations") or {}
        if annotations.get("helm.sh/hook") != "pre-install,pre-upgrade":
            problem(name_of(job), "is not a pre-install,pre-upgrade hook")
        pod_spec = job["spec"]["template"]["spec"]
        for container in pod_spec["containers"]:
            if container.get("command") != ["agentfleet-dispatcher", "migrate"]:
                problem(name_of(job), f"runs {container.get('command')}, not agentfleet-dispatcher migrate")
            check_container(f"{name_of(job)} container {container['name']}", container, pod_spec, config)
        volume = (pod_spec.get("volumes") or [{}])[0].get("configMap", {}).get("name")
        hook_config = configmaps.get(volume)
        if hook_config is None or (hook_config["metadata"].get("annotations") or {}).get("helm.sh/hook") != "pre-install,pre-upgrade" \
                or int(hook_config["metadata"]["annotations"].get("helm.sh/hook-weight", 0)) >= int(annotations.get("helm.sh/hook-weight", 0)):
            problem(name_of(job), "its configuration is not a hook ConfigMap created before it")
    if not jobs:
        problem("chart", "no migration Job")

    # Monitoring objects carry the chart's files unchanged.
    monitors = by_kind.get("ServiceMonitor", [])
    rules = by_kind.get("PrometheusRule", [])
    dashboards = [d for d in by_kind.get("ConfigMap", []) if "agentfleet.json" in (d.get("data") or {})]
    if not monitoring:
        for found in (monitors, rules, dashboards):
            for doc in found:
                problem(name_of(doc), "rendered although monitoring is off")
    else:
        if len(monitors) != 1 or len(rules) != 1 or len(dashboards) != 1:
            problem("chart", "expected one ServiceMonitor, PrometheusRule and dashboard ConfigMap")
        for monitor in monitors:
            job_label = monitor["spec"].get("jobLabel")
            for service in by_kind.get("Service", []):
                labels = service["metadata"]["labels"]
                if not selects(monitor["spec"]["selector"]["matchLabels"], labels):
                    problem(name_of(monitor), f"does not select {name_of(service)}")
                if not str(labels.get(job_label, "")).startswith("agentfleet-"):
                    problem(name_of(service), f"has no {job_label} label naming its job (the alert rules match job=~'.*agentfleet.*')")
                if "metrics" not in {p["name"] for p in service["spec"]["ports"]}:
                    problem(name_of(service), "has no port named metrics to scrape")
        alerts = yaml.safe_load((chart / "files/prometheus/alerts.yaml").read_text())
        for rule in rules:
            if rule["spec"] != alerts:
                problem(name_of(rule), "differs from files/prometheus/alerts.yaml")
        dashboard = json.loads((chart / "files/dashboards/agentfleet.json").read_text())
        for doc in dashboards:
            if json.loads(doc["data"]["agentfleet.json"]) != dashboard:
                problem(name_of(doc), "differs from files/dashboards/agentfleet.json")
            if doc["metadata"]["labels"].get("grafana_dashboard") != "1":
                problem(name_of(doc), "lacks the Grafana sidecar label grafana_dashboard: \"1\"")

    (out / "env").write_text("".join(f"{k}={'' if v is None else v}\n" for k, v in sorted(env_seen.items()) if k != "AGENTFLEET_CONFIG"))
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 1
    print(f"ok: {len(docs)} manifests ({', '.join(sorted(f'{len(v)} {k}' for k, v in by_kind.items()))})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
