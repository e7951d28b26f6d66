{{/* The chart's name, shortened to fit the 63 characters of a DNS label. */}}
{{- define "interlock.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "interlock.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "interlock.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "interlock.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "interlock.selectorLabels" -}}
app.kubernetes.io/name: {{ include "interlock.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "interlock.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "interlock.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The Secret that holds INTERLOCK_SECRET, and the key in it. */}}
{{- define "interlock.sealingSecretName" -}}
{{- default (printf "%s-sealing" (include "interlock.fullname" .)) .Values.sealing.existingSecret }}
{{- end }}

{{/* The Secret the chart makes for the API keys it generates. */}}
{{- define "interlock.apiKeysSecretName" -}}
{{- printf "%s-api-keys" (include "interlock.fullname" .) }}
{{- end }}

{{- define "interlock.configMapName" -}}
{{- default (printf "%s-config" (include "interlock.fullname" .)) .Values.config.existingConfigMap }}
{{- end }}

{{/* The most gateways that may run at once. */}}
{{- define "interlock.maxReplicas" -}}
{{- if .Values.autoscaling.enabled }}{{ .Values.autoscaling.maxReplicas }}{{ else }}{{ .Values.replicaCount }}{{ end }}
{{- end }}

{{/*
Whether the gateways share their state. Every replica must see each
confirm token's single use (Redis) and append to one audit chain
(PostgreSQL): with tokens in each process's memory a token could be
redeemed once per replica, and with the audit log on each pod's own
volume there would be as many chains as pods, lost with them.
*/}}
{{- define "interlock.shared" -}}
{{- if .Values.config.existingConfigMap }}
{{- if .Values.config.sharedStores }}true{{ end }}
{{- else if and .Values.store.redis.url (or .Values.audit.postgres .Values.store.postgres.url) }}true
{{- end }}
{{- end }}

{{/* Whether the data directory is a claim of its own: one gateway only. */}}
{{- define "interlock.persistent" -}}
{{- if and .Values.persistence.enabled (eq (include "interlock.maxReplicas" .) "1") }}true{{ end }}
{{- end }}

{{/* Refusals, checked by every template that includes this one. */}}
{{- define "interlock.validate" -}}
{{- $max := include "interlock.maxReplicas" . | atoi }}
{{- if and (gt $max 1) (not (include "interlock.shared" .)) }}
{{- if .Values.config.existingConfigMap }}
{{- fail (printf "%d replicas need shared stores: set config.sharedStores=true once the ConfigMap %s sets store.redis and audit.postgres (every replica must see each confirm token's single use and append to one audit chain)" $max .Values.config.existingConfigMap) }}
{{- else }}
{{- fail (printf "%d replicas need shared stores: set store.redis.url (the single use of confirm tokens) and store.postgres.url or audit.postgres (one audit chain for all replicas); without them run one replica" $max) }}
{{- end }}
{{- end }}
{{- if and .Values.autoscaling.enabled (gt (int .Values.autoscaling.minReplicas) (int .Values.autoscaling.maxReplicas)) }}
{{- fail "autoscaling.minReplicas is more than autoscaling.maxReplicas" }}
{{- end }}
{{- $stop := add (int .Values.drain.preStopSeconds) 20 }}
{{- if lt (int .Values.drain.terminationGracePeriodSeconds) $stop }}
{{- fail (printf "drain.terminationGracePeriodSeconds must be at least %d: the preStop pause (%d s), then up to 10 s for calls in flight and the time to close sessions, sign the last checkpoint and stop the children" $stop (int .Values.drain.preStopSeconds)) }}
{{- end }}
{{- if and (not .Values.config.existingConfigMap) (not .Values.auth.keys) (not .Values.auth.generatedKeys) (not .Values.auth.oauth.issuer) }}
{{- fail "the gateway listens on every address of the pod, so it needs API keys (auth.keys or auth.generatedKeys) or an OAuth issuer (auth.oauth.issuer)" }}
{{- end }}
{{- if and .Values.auth.oauth.console.clientID (not .Values.auth.oauth.issuer) }}
{{- fail "auth.oauth.console signs approvers in with the issuer: set auth.oauth.issuer" }}
{{- end }}
{{- if and .Values.serviceMonitor.enabled (not .Values.serviceMonitor.keySecret.name) (not .Values.serviceMonitor.keySecret.key) }}
{{- fail "serviceMonitor needs an API key to scrape /metrics: set serviceMonitor.keySecret.key to the name of an auth.generatedKeys entry, or keySecret.name and keySecret.key to an existing Secret" }}
{{- end }}
{{- end }}
