{{/* Names and labels. */}}

{{- define "agentfleet.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* At most 52 characters, so "-dispatcher" still fits a 63-character name. */}}
{{- define "agentfleet.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "agentfleet.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "agentfleet.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: agentfleet
{{- end -}}

{{/* Selector labels of one component: include "agentfleet.selectorLabels" (list . "worker") */}}
{{- define "agentfleet.selectorLabels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ include "agentfleet.name" $root }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "agentfleet.componentLabels" -}}
{{ include "agentfleet.labels" (index . 0) }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "agentfleet.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "agentfleet.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "agentfleet.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/*
Listen ports, taken from the configuration (one source of truth). The programs bind
them; Services, probes and monitors refer to them by name.
*/}}
{{- define "agentfleet.httpPort" -}}
{{- $http := (.Values.config.dispatcher | default dict).http | default dict -}}
{{- if not $http.port -}}
{{- fail "config.dispatcher.http.port must be set (not 0): the dispatcher's Service and probes use it" -}}
{{- end -}}
{{- if ne (toString $http.host) "0.0.0.0" -}}
{{- fail (printf "config.dispatcher.http.host is %q: it must be 0.0.0.0 in a pod, or nothing outside the container reaches the API" (toString $http.host)) -}}
{{- end -}}
{{- $http.port -}}
{{- end -}}

{{- define "agentfleet.metricsPort" -}}
{{- $metrics := .Values.config.metrics | default dict -}}
{{- if not $metrics.port -}}
{{- fail "config.metrics.port must be set (not 0): the workers' probes and the metrics scrape use it" -}}
{{- end -}}
{{- if ne (toString $metrics.host) "0.0.0.0" -}}
{{- fail (printf "config.metrics.host is %q: it must be 0.0.0.0 in a pod, or probes and Prometheus cannot reach /metrics, /healthz and /readyz" (toString $metrics.host)) -}}
{{- end -}}
{{- $metrics.port -}}
{{- end -}}

{{/* config.worker.shutdown_grace_s, or the programs' default of 30. */}}
{{- define "agentfleet.workerGrace" -}}
{{- $worker := .Values.config.worker | default dict -}}
{{- if hasKey $worker "shutdown_grace_s" -}}{{ $worker.shutdown_grace_s }}{{- else -}}30{{- end -}}
{{- end -}}

{{/*
The worker pod's grace: after config.worker.shutdown_grace_s a worker still releases the
leases of unfinished tasks (one statement, up to 5 s), flushes its producer (up to 10 s)
and leaves the consumer group (up to 10 s). Default: that grace + 30 s; at least + 15 s.
*/}}
{{- define "agentfleet.workerTerminationGrace" -}}
{{- $grace := include "agentfleet.workerGrace" . | int -}}
{{- $set := .Values.worker.terminationGracePeriodSeconds -}}
{{- if kindIs "invalid" $set -}}
{{- add $grace 30 -}}
{{- else if lt (int $set) (add $grace 15) -}}
{{- fail (printf "worker.terminationGracePeriodSeconds (%d) must be at least config.worker.shutdown_grace_s + 15 (%d): after the grace a worker still releases leases, flushes and leaves its group, and the kubelet would kill it midway" (int $set) (add $grace 15)) -}}
{{- else -}}
{{- $set -}}
{{- end -}}
{{- end -}}

{{/*
Environment variables from Secrets and extraEnv, as a list of {env, secretName, key};
"agentfleet.secretEnvEntries" returns it as JSON for the templates below.
*/}}
{{- define "agentfleet.secretEnvEntries" -}}
{{- $s := .Values.secrets -}}
{{- $entries := list (dict "env" $s.database.env "secretName" $s.database.secretName "key" $s.database.key) -}}
{{- if $s.kafkaSasl.secretName -}}
{{- $entries = append $entries (dict "env" $s.kafkaSasl.usernameEnv "secretName" $s.kafkaSasl.secretName "key" $s.kafkaSasl.usernameKey) -}}
{{- $entries = append $entries (dict "env" $s.kafkaSasl.passwordEnv "secretName" $s.kafkaSasl.secretName "key" $s.kafkaSasl.passwordKey) -}}
{{- end -}}
{{- range (concat $s.modelApiKeys $s.apiKeyHashes $s.extra) -}}
{{- $entries = append $entries (dict "env" .env "secretName" .secretName "key" .key) -}}
{{- end -}}
{{- toJson $entries -}}
{{- end -}}

{{/*
The configuration file's text, as JSON (which YAML reads as it is): every string stays
quoted, so a ${SECRET} that holds digits or "true" is still a string. Fails when:
- a reference is malformed (the programs would refuse it at start);
- it names ${VAR} without a default and no secrets entry or extraEnv provides VAR
  (HOSTNAME, which Kubernetes sets to the pod's name, needs none);
- a credential is written literally instead of as ${VAR}: a password in postgres.url, a
  model endpoint's api_key, an API key's sha256, a Kafka password or secret property, a
  tool header that carries credentials (Authorization, or a name with key, token or
  secret in it);
- two entries set the same variable.
*/}}
{{- define "agentfleet.config" -}}
{{- $entries := include "agentfleet.secretEnvEntries" . | fromJsonArray -}}
{{- $provided := dict "HOSTNAME" true -}}
{{- range $entries -}}
{{- if hasKey $provided .env -}}
{{- fail (printf "secrets: the environment variable %s is set by two entries" .env) -}}
{{- end -}}
{{- $_ := set $provided .env true -}}
{{- end -}}
{{- range $.Values.extraEnv -}}
{{- if hasKey $provided .name -}}
{{- fail (printf "extraEnv: %s is also set by secrets" .name) -}}
{{- end -}}
{{- $_ := set $provided .name true -}}
{{- end -}}
{{- $config := .Values.config -}}
{{- $reference := "\\$\\{[A-Za-z_][A-Za-z0-9_]*(:-[^}]*)?\\}" -}}
{{- $pg := ($config.postgres | default dict).url | default "" | toString -}}
{{- if regexMatch "(://[^/@:]*:[^/@]*@)|(password\\s*=)" (regexReplaceAll $reference $pg "") -}}
{{- fail "config.postgres.url holds a literal password: put the URL (or its password) in a Secret and write ${AGENTFLEET_PG_URL}" -}}
{{- end -}}
{{- range $i, $model := $config.models | default list -}}
{{- range $j, $endpoint := $model.endpoints | default list -}}
{{- if and $endpoint.api_key (not (regexMatch $reference (toString $endpoint.api_key))) -}}
{{- fail (printf "config.models[%d].endpoints[%d].api_key is written literally: take it from a Secret (secrets.modelApiKeys) as ${VAR}" $i $j) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $i, $key := ($config.auth | default dict).api_keys | default list -}}
{{- if not (regexMatch $reference (toString $key.sha256)) -}}
{{- fail (printf "config.auth.api_keys[%d].sha256 is written literally: take it from a Secret (secrets.apiKeyHashes) as ${VAR}" $i) -}}
{{- end -}}
{{- end -}}
{{- range $name, $value := ($config.kafka | default dict).properties | default dict -}}
{{- if and (regexMatch "(?i)(password|secret)" $name) (not (regexMatch $reference (toString $value))) -}}
{{- fail (printf "config.kafka.properties.%s is written literally: take it from a Secret (secrets.kafkaSasl or secrets.extra) as ${VAR}" $name) -}}
{{- end -}}
{{- end -}}
{{- range $i, $tool := $config.tools | default list -}}
{{- range $name, $value := $tool.headers | default dict -}}
{{- if and (regexMatch "(?i)(authorization|key|token|secret)" $name) (not (regexMatch $reference (toString $value))) -}}
{{- fail (printf "config.tools[%d].headers.%s carries a credential written literally: take it from a Secret (secrets.extra) as ${VAR}" $i $name) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $text := toPrettyJson $config -}}
{{- range regexFindAll "\\$?\\$\\{[^}\\n]*\\}?" $text -1 -}}
{{- if not (hasPrefix "$$" .) -}}
{{- if not (regexMatch (printf "^%s$" $reference) .) -}}
{{- fail (printf "config holds a malformed reference %s: write ${NAME} or ${NAME:-default}, or $${ for a literal ${" .) -}}
{{- end -}}
{{- if not (contains ":-" .) -}}
{{- $name := trimSuffix "}" (trimPrefix "${" .) -}}
{{- if not (hasKey $provided $name) -}}
{{- fail (printf "config refers to ${%s}, but no entry of secrets nor extraEnv sets %s" $name $name) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $text -}}
{{- end -}}

{{/* Environment of every container: the configuration's path and its variables. */}}
{{- define "agentfleet.env" -}}
- name: AGENTFLEET_CONFIG
  value: /etc/agentfleet/agentfleet.yaml
{{- range (include "agentfleet.secretEnvEntries" . | fromJsonArray) }}
- name: {{ .env }}
  valueFrom:
    secretKeyRef:
      name: {{ .secretName }}
      key: {{ .key | quote }}
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Volumes: the configuration (ConfigMap NAME) and a writable /tmp. */}}
{{- define "agentfleet.volumes" -}}
{{- $root := index . 0 -}}
- name: config
  configMap:
    name: {{ index . 1 }}
- name: tmp
  emptyDir:
    sizeLimit: 64Mi
{{- with $root.Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "agentfleet.volumeMounts" -}}
- name: config
  mountPath: /etc/agentfleet
  readOnly: true
- name: tmp
  mountPath: /tmp
{{- with .Values.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Preferred or required anti-affinity of one component's pods across nodes. */}}
{{- define "agentfleet.affinity" -}}
{{- $root := index . 0 -}}
{{- $component := index . 1 -}}
{{- $values := index . 2 -}}
{{- if $values.affinity -}}
{{ toYaml $values.affinity }}
{{- else if eq $values.antiAffinity "hard" -}}
podAntiAffinity:
  requiredDuringSchedulingIgnoredDuringExecution:
    - topologyKey: kubernetes.io/hostname
      labelSelector:
        matchLabels:
          {{- include "agentfleet.selectorLabels" (list $root $component) | nindent 10 }}
{{- else if eq $values.antiAffinity "soft" -}}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "agentfleet.selectorLabels" (list $root $component) | nindent 12 }}
{{- end -}}
{{- end -}}
