{{/*
Names, labels, images and the pieces every component shares. Components are named
<fullname>-<component> (relay, access, pubsub, report, presence, redis, snapshot).
*/}}

{{- define "apex-mesh.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "apex-mesh.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "apex-mesh.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "apex-mesh.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* <fullname>-<component>; call with (dict "root" $ "component" "relay"). */}}
{{- define "apex-mesh.componentName" -}}
{{- printf "%s-%s" (include "apex-mesh.fullname" .root | trunc 52 | trimSuffix "-") .component -}}
{{- end -}}

{{/* Labels of every resource; (dict "root" $ "component" NAME), component optional. */}}
{{- define "apex-mesh.labels" -}}
helm.sh/chart: {{ include "apex-mesh.chart" .root }}
{{ include "apex-mesh.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: apex-mesh
{{- with .root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Selector labels: name, instance and component only (selectors are immutable). */}}
{{- define "apex-mesh.selectorLabels" -}}
app.kubernetes.io/name: {{ include "apex-mesh.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- if .component }}
app.kubernetes.io/component: {{ .component }}
{{- end }}
{{- end -}}

{{/* metadata.annotations of every resource, when commonAnnotations has any. */}}
{{- define "apex-mesh.annotations" -}}
{{- with .Values.commonAnnotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The metadata block: name, namespace, labels, annotations. */}}
{{- define "apex-mesh.metadata" -}}
name: {{ include "apex-mesh.componentName" . }}
namespace: {{ include "apex-mesh.namespace" .root }}
labels:
  {{- include "apex-mesh.labels" . | nindent 2 }}
{{- include "apex-mesh.annotations" .root }}
{{- end -}}

{{/*
An apex-mesh image: REGISTRY/REPOSITORY:TAG or @DIGEST; (dict "root" $ "image" .Values.x.image).
The tag falls back to image.tag, then the chart's appVersion.
*/}}
{{- define "apex-mesh.image" -}}
{{- $registry := default .root.Values.image.registry .root.Values.global.imageRegistry -}}
{{- $tag := .image.tag | default .root.Values.image.tag | default .root.Chart.AppVersion | toString -}}
{{- $digest := .image.digest | default .root.Values.image.digest -}}
{{- $repository := .image.repository -}}
{{- if $registry }}{{ $repository = printf "%s/%s" $registry $repository }}{{ end -}}
{{- if $digest -}}
{{- printf "%s@%s" $repository $digest -}}
{{- else -}}
{{- printf "%s:%s" $repository $tag -}}
{{- end -}}
{{- end -}}

{{- define "apex-mesh.imagePullSecrets" -}}
{{- with .Values.global.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* host:port of a component's Service inside the cluster; (dict "root" $ "component" C "port" P). */}}
{{- define "apex-mesh.address" -}}
{{- printf "%s.%s.svc.%s:%v" (include "apex-mesh.componentName" .) (include "apex-mesh.namespace" .root) .root.Values.clusterDomain .port -}}
{{- end -}}

{{/* ------------------------------------------------------------------ Redis */}}

{{- define "apex-mesh.redis.secretName" -}}
{{- if .Values.redis.enabled -}}
{{- default (include "apex-mesh.componentName" (dict "root" . "component" "redis")) .Values.redis.existingSecret -}}
{{- else -}}
{{- required "externalRedis.existingSecret is required when redis.enabled is false" .Values.externalRedis.existingSecret -}}
{{- end -}}
{{- end -}}

{{- define "apex-mesh.redis.passwordKey" -}}
{{- if .Values.redis.enabled -}}{{ .Values.redis.passwordKey }}{{- else -}}{{ .Values.externalRedis.passwordKey }}{{- end -}}
{{- end -}}

{{/* The chart's own Redis runs replicated with Sentinel (redis.architecture): "true" or "". */}}
{{- define "apex-mesh.redis.replication" -}}
{{- if and .Values.redis.enabled (eq .Values.redis.architecture "replication") -}}true{{- end -}}
{{- end -}}

{{/* The DNS name of every Redis pod (the headless Service's records), one per line. */}}
{{- define "apex-mesh.redis.nodes" -}}
{{- $name := include "apex-mesh.componentName" (dict "root" . "component" "redis") -}}
{{- $domain := printf "%s-headless.%s.svc.%s" $name (include "apex-mesh.namespace" .) .Values.clusterDomain -}}
{{- range $i := until (int .Values.redis.replicas) }}
{{ printf "%s-%d.%s" $name $i $domain }}
{{- end -}}
{{- end -}}

{{/* The environment the replication scripts read (find-primary.sh). */}}
{{- define "apex-mesh.redis.nodeEnv" -}}
{{- $sentinel := .Values.redis.sentinel -}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: REDIS_NODES
  value: {{ include "apex-mesh.redis.nodes" . | trim | splitList "\n" | join " " | quote }}
- name: REDIS_PORT
  value: "6379"
- name: SENTINEL_PORT
  value: {{ $sentinel.port | quote }}
- name: PRIMARY_NAME
  value: {{ $sentinel.primaryName | quote }}
{{- /* a failover's time, within the Redis container's startup probe (300 s) */}}
- name: PRIMARY_WAIT_SECONDS
  value: {{ min 240 (div (add $sentinel.downAfterMilliseconds $sentinel.failoverTimeout) 1000) | quote }}
{{- end -}}

{{/*
The scripts of the replicated Redis pods (the ConfigMap FULLNAME-redis-scripts), sourced
by the Redis container (its role at start, its preStop hand-over) and the Sentinel
container (the primary it monitors first).
*/}}
{{- define "apex-mesh.redis.scripts" -}}
find-primary.sh: |
  # Sourced with REDIS_NODES (every Redis pod's DNS name, pod 0 first), POD_NAME,
  # REDIS_PORT, SENTINEL_PORT, PRIMARY_NAME and REDISCLI_AUTH (the password) set.

  # me: this pod's DNS name.
  me=""
  for node in $REDIS_NODES; do
    case "$node" in "$POD_NAME".*) me="$node" ;; esac
  done
  if [ -z "$me" ]; then echo "$POD_NAME is not in REDIS_NODES" >&2; exit 1; fi

  # ask NODE ARGS...: a command to NODE's sentinel (3 s at most).
  ask() {
    _host=$1
    shift
    timeout 3 redis-cli --no-auth-warning -h "$_host" -p "$SENTINEL_PORT" "$@" 2>/dev/null
  }

  # find_primary: primary := the pod the sentinels name (any pod's sentinel, asked in
  # turn; named=yes), else pod 0 (named=no: first boot, or no sentinel left).
  find_primary() {
    primary=""
    named=no
    for node in $REDIS_NODES; do
      answer=$(ask "$node" sentinel get-master-addr-by-name "$PRIMARY_NAME" | head -n 1) || answer=""
      for known in $REDIS_NODES; do
        if [ "$answer" = "$known" ]; then
          primary="$answer"
          named=yes
          return 0
        fi
      done
    done
    primary=${REDIS_NODES%% *}
  }

  # hand_over (preStop): a primary with a replica asks another pod's sentinel to fail
  # over, then waits up to 20 s for its own role to change.
  hand_over() {
    info=$(redis-cli -p "$REDIS_PORT" info replication 2>/dev/null) || return 0
    case "$info" in *role:master*) ;; *) return 0 ;; esac
    case "$info" in *connected_slaves:0*) return 0 ;; esac
    for node in $REDIS_NODES; do
      if [ "$node" = "$me" ]; then continue; fi
      if ask "$node" sentinel failover "$PRIMARY_NAME" | grep -q OK; then
        break
      fi
    done
    waited=0
    while [ "$waited" -lt 20 ]; do
      redis-cli -p "$REDIS_PORT" info replication 2>/dev/null | grep -q '^role:master' || return 0
      sleep 1
      waited=$((waited + 1))
    done
  }
{{- end -}}

{{/* An image of the chart's Redis pods (its own registry, unless global.imageRegistry
mirrors all); (dict "root" $ "image" .Values.redis.x.image). */}}
{{- define "apex-mesh.redis.anyImage" -}}
{{- $image := .image -}}
{{- $registry := default $image.registry .root.Values.global.imageRegistry -}}
{{- $repository := ternary (printf "%s/%s" $registry $image.repository) $image.repository (ne $registry "") -}}
{{- if $image.digest -}}
{{- printf "%s@%s" $repository $image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repository (toString $image.tag) -}}
{{- end -}}
{{- end -}}

{{/* The Redis image (its own registry, unless global.imageRegistry mirrors all). */}}
{{- define "apex-mesh.redis.image" -}}
{{- $image := .Values.redis.image -}}
{{- $registry := default $image.registry .Values.global.imageRegistry -}}
{{- $repository := ternary (printf "%s/%s" $registry $image.repository) $image.repository (ne $registry "") -}}
{{- if $image.digest -}}
{{- printf "%s@%s" $repository $image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repository (toString $image.tag) -}}
{{- end -}}
{{- end -}}

{{/*
The storage request of the Redis StatefulSet's claim template: redis.persistence.size,
unless the StatefulSet exists (lookup) with another size. A StatefulSet's
volumeClaimTemplates cannot change, so rendering the new size would make the upgrade
fail; the chart keeps the existing one and NOTES say how to grow the volume by hand
(apex-mesh.redis.resizeNotes).
*/}}
{{- define "apex-mesh.redis.claimSize" -}}
{{- $size := .Values.redis.persistence.size -}}
{{- $name := include "apex-mesh.componentName" (dict "root" . "component" "redis") -}}
{{- $existing := lookup "apps/v1" "StatefulSet" (include "apex-mesh.namespace" .) $name -}}
{{- if $existing -}}
{{- range (($existing.spec | default dict).volumeClaimTemplates | default list) -}}
{{- if eq .metadata.name "data" -}}
{{- $size = .spec.resources.requests.storage -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $size -}}
{{- end -}}

{{/* NOTES when redis.persistence.size differs from the existing claim template's. */}}
{{- define "apex-mesh.redis.resizeNotes" -}}
{{- $kept := include "apex-mesh.redis.claimSize" . -}}
{{- $wanted := toString .Values.redis.persistence.size -}}
{{- if and .Values.redis.enabled .Values.redis.persistence.enabled (ne $kept $wanted) -}}
{{- $ns := include "apex-mesh.namespace" . -}}
{{- $name := include "apex-mesh.componentName" (dict "root" . "component" "redis") }}
WARNING: redis.persistence.size is {{ $wanted }}, but the StatefulSet {{ $name }} claims {{ $kept }}
and a StatefulSet's volumeClaimTemplates cannot change: the chart kept {{ $kept }}. To grow
the volume (its StorageClass must have allowVolumeExpansion: true):
{{ range $i := until (ternary (int .Values.redis.replicas) 1 (eq (include "apex-mesh.redis.replication" .) "true")) }}
     kubectl -n {{ $ns }} patch pvc data-{{ $name }}-{{ $i }} -p '{"spec":{"resources":{"requests":{"storage":"{{ $wanted }}"}}}}'
     kubectl -n {{ $ns }} get pvc data-{{ $name }}-{{ $i }} -w     # until CAPACITY shows {{ $wanted }}
{{- end }}
     kubectl -n {{ $ns }} delete statefulset {{ $name }} --cascade=orphan
     helm upgrade {{ .Release.Name }} ... (the same values)

   The orphaned pod and its volume keep running; the upgrade makes the StatefulSet again
   with {{ $wanted }} and it adopts them.
{{- end -}}
{{- end -}}

{{/* The Redis URL; the password comes from APEXMESH_REDIS_PASSWORD (dependent variable). */}}
{{- define "apex-mesh.redis.url" -}}
{{- if include "apex-mesh.redis.replication" . -}}
{{- /* Every pod's sentinel (the same password as the primary's), the primary's name. */ -}}
{{- $sentinels := list -}}
{{- range (include "apex-mesh.redis.nodes" . | trim | splitList "\n") -}}
{{- $sentinels = append $sentinels (printf "%s:%v" . $.Values.redis.sentinel.port) -}}
{{- end -}}
{{- printf "redis+sentinel://:$(APEXMESH_REDIS_PASSWORD)@%s/%s/0?sentinel_password=$(APEXMESH_REDIS_PASSWORD)" (join "," $sentinels) .Values.redis.sentinel.primaryName -}}
{{- else if .Values.redis.enabled -}}
{{- printf "redis://:$(APEXMESH_REDIS_PASSWORD)@%s:6379/0" (include "apex-mesh.componentName" (dict "root" . "component" "redis")) -}}
{{- else -}}
{{- $ext := .Values.externalRedis -}}
{{- $scheme := ternary "rediss" "redis" $ext.tls -}}
{{- $url := "" -}}
{{- if eq $ext.architecture "cluster" -}}
{{- /* docs/redis.md: redis-py's cluster client; keys hash-tagged by slot group. */ -}}
{{- $hosts := required "externalRedis.hosts is required for architecture cluster" (join "," $ext.hosts) -}}
{{- $url = printf "%s+cluster://:$(APEXMESH_REDIS_PASSWORD)@%s" $scheme $hosts -}}
{{- else if eq $ext.architecture "sentinel" -}}
{{- $hosts := required "externalRedis.hosts (the sentinels) is required for architecture sentinel" (join "," $ext.hosts) -}}
{{- $url = printf "%s+sentinel://:$(APEXMESH_REDIS_PASSWORD)@%s/%s/%v" $scheme $hosts (required "externalRedis.sentinelPrimary is required for architecture sentinel" $ext.sentinelPrimary) $ext.db -}}
{{- else -}}
{{- $url = printf "%s://:$(APEXMESH_REDIS_PASSWORD)@%s:%v/%v" $scheme (required "externalRedis.host is required when redis.enabled is false" $ext.host) $ext.port $ext.db -}}
{{- end -}}
{{- if and .Values.externalRedis.tls .Values.externalRedis.caSecret -}}
{{- $url = printf "%s?ssl_ca_certs=/etc/apex-mesh/redis-ca/ca.crt" $url -}}
{{- end -}}
{{- $url -}}
{{- end -}}
{{- end -}}

{{/* Environment of a Redis client: the password, then the URL built from it. */}}
{{- define "apex-mesh.redis.env" -}}
- name: APEXMESH_REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "apex-mesh.redis.secretName" . }}
      key: {{ include "apex-mesh.redis.passwordKey" . }}
- name: APEXMESH_REDIS_URL
  value: {{ include "apex-mesh.redis.url" . | quote }}
- name: APEXMESH_REDIS_PREFIX
  value: {{ .Values.redisPrefix | quote }}
{{- if and (not .Values.redis.enabled) .Values.externalRedis.waitReplicas }}
- name: APEXMESH_REDIS_WAIT_REPLICAS
  value: {{ .Values.externalRedis.waitReplicas | quote }}
- name: APEXMESH_REDIS_WAIT_TIMEOUT_MS
  value: {{ .Values.externalRedis.waitTimeoutMs | quote }}
{{- else if and (include "apex-mesh.redis.replication" .) .Values.redis.waitReplicas }}
- name: APEXMESH_REDIS_WAIT_REPLICAS
  value: {{ .Values.redis.waitReplicas | quote }}
- name: APEXMESH_REDIS_WAIT_TIMEOUT_MS
  value: {{ .Values.redis.waitTimeoutMs | quote }}
{{- end }}
{{- end -}}

{{- define "apex-mesh.redis.caVolume" -}}
{{- if and (not .Values.redis.enabled) .Values.externalRedis.tls .Values.externalRedis.caSecret }}
- name: redis-ca
  secret:
    secretName: {{ .Values.externalRedis.caSecret }}
{{- end }}
{{- end -}}

{{- define "apex-mesh.redis.caMount" -}}
{{- if and (not .Values.redis.enabled) .Values.externalRedis.tls .Values.externalRedis.caSecret }}
- name: redis-ca
  mountPath: /etc/apex-mesh/redis-ca
  readOnly: true
{{- end }}
{{- end -}}

{{/* ------------------------------------------------------------------ relay */}}

{{- define "apex-mesh.relay.tlsSecretName" -}}
{{- if eq .Values.relay.tls.mode "secret" -}}
{{- required "relay.tls.existingSecret is required when relay.tls.mode is secret" .Values.relay.tls.existingSecret -}}
{{- else -}}
{{- printf "%s-tls" (include "apex-mesh.componentName" (dict "root" . "component" "relay")) -}}
{{- end -}}
{{- end -}}

{{- define "apex-mesh.relay.saslSecretName" -}}
{{- default (printf "%s-sasl" (include "apex-mesh.componentName" (dict "root" . "component" "relay"))) .Values.relay.sasl.existingSecret -}}
{{- end -}}

{{/*
DNS names of the relay's certificate (autoGenerated and certManager): relay.tls.dnsNames,
the domains (includeDomains) and the relay Service's in-cluster names (inClusterNames; a
public ACME CA refuses them).
*/}}
{{- define "apex-mesh.relay.dnsNames" -}}
{{- $tls := .Values.relay.tls -}}
{{- $names := $tls.dnsNames -}}
{{- if $tls.includeDomains }}{{ $names = concat $names .Values.domains }}{{ end -}}
{{- if $tls.inClusterNames -}}
{{- $relay := include "apex-mesh.componentName" (dict "root" . "component" "relay") -}}
{{- $ns := include "apex-mesh.namespace" . -}}
{{- $names = concat $names (list $relay (printf "%s.%s" $relay $ns) (printf "%s.%s.svc" $relay $ns) (printf "%s.%s.svc.%s" $relay $ns .Values.clusterDomain)) -}}
{{- end -}}
{{- toYaml (uniq $names) -}}
{{- end -}}

{{/*
The name the helm test checks the relay's certificate for: the Service's short name when
the certificate carries the in-cluster names (or the Secret is the user's: relay.tls.dnsNames
then names what it carries, first), else its first name.
*/}}
{{- define "apex-mesh.relay.serverName" -}}
{{- $tls := .Values.relay.tls -}}
{{- if or (and $tls.inClusterNames (ne $tls.mode "secret")) (and (eq $tls.mode "secret") (not $tls.dnsNames)) -}}
{{- include "apex-mesh.componentName" (dict "root" . "component" "relay") -}}
{{- else -}}
{{- first (include "apex-mesh.relay.dnsNames" . | fromYamlArray) -}}
{{- end -}}
{{- end -}}

{{/*
What relays trust when they dial other domains' relays, and the helm test when it dials
this one (relay.tls.trust): tlsSecret (the TLS Secret's ca.crt), peerCASecret (that
Secret's ca.crt) or system (the image's system roots: a public CA, no ca.crt needed).
auto: peerCASecret when set; else tlsSecret for the chart's own CA (autoGenerated) and
certManager (a CA issuer writes ca.crt); else system (an existing Secret's ca.crt is
optional).
*/}}
{{- define "apex-mesh.relay.trust" -}}
{{- $tls := .Values.relay.tls -}}
{{- if ne $tls.trust "auto" -}}
{{- $tls.trust -}}
{{- else if $tls.peerCASecret -}}
peerCASecret
{{- else if eq $tls.mode "secret" -}}
system
{{- else -}}
tlsSecret
{{- end -}}
{{- end -}}

{{/* How the relay's certificate is renewed (the expiry alert's advice), by tls.mode. */}}
{{- define "apex-mesh.relay.renewalHint" -}}
{{- $mode := .Values.relay.tls.mode -}}
{{- $secret := include "apex-mesh.relay.tlsSecretName" . -}}
{{- if eq $mode "autoGenerated" -}}
The chart renews it on helm upgrade within relay.tls.autoGenerated.renewBeforeDays ({{ .Values.relay.tls.autoGenerated.renewBeforeDays }}) of its expiry: run helm upgrade {{ .Release.Name }}; the relays reload the Secret {{ $secret }}.
{{- else if eq $mode "certManager" -}}
cert-manager should have renewed it renewBefore ({{ .Values.relay.tls.certManager.renewBefore }}) ahead: kubectl -n {{ include "apex-mesh.namespace" . }} describe certificate {{ include "apex-mesh.componentName" (dict "root" . "component" "relay") }}.
{{- else -}}
Put a renewed certificate in the Secret {{ $secret }}; the relays reload it.
{{- end -}}
{{- end -}}

{{/* The CA bundle the relay and the helm test read (APEXMESH_RELAY_TLS_CA, --ca). */}}
{{- define "apex-mesh.relay.caFile" -}}
{{- if eq (include "apex-mesh.relay.trust" .) "system" -}}
{{- .Values.relay.tls.systemCABundle -}}
{{- else -}}
/etc/apex-mesh/peer-ca/ca.crt
{{- end -}}
{{- end -}}

{{/* The volume holding that bundle: none for the system roots (they are the image's). */}}
{{- define "apex-mesh.relay.caVolume" -}}
{{- $trust := include "apex-mesh.relay.trust" . -}}
{{- if ne $trust "system" }}
- name: peer-ca
  secret:
    secretName: {{ if eq $trust "peerCASecret" }}{{ required "relay.tls.peerCASecret is required when relay.tls.trust is peerCASecret" .Values.relay.tls.peerCASecret }}{{ else }}{{ include "apex-mesh.relay.tlsSecretName" . }}{{ end }}
    items:
      - key: ca.crt
        path: ca.crt
{{- end }}
{{- end -}}

{{- define "apex-mesh.relay.caMount" -}}
{{- if ne (include "apex-mesh.relay.trust" .) "system" }}
- name: peer-ca
  mountPath: /etc/apex-mesh/peer-ca
  readOnly: true
{{- end }}
{{- end -}}

{{/*
The relay's preStop hook: POST /admin/v1/drain on the relay's own admin address (the
pod's, from its APEXMESH_RELAY_HTTP_* variables) with the admin token, so it accepts no
new session and its readiness goes false, then wait until its sessions have ended or
relay.drain.graceSeconds have passed (GET /admin/v1/drain, as apexctl drain --wait).
SIGTERM follows, with shutdownGraceSeconds for the rest. A relay that does not answer
the drain fails the hook at once (an event on the pod) and goes straight to SIGTERM.
*/}}
{{- define "apex-mesh.relay.drainHook" -}}
preStop:
  exec:
    command:
      - python
      - -c
      - |
        import json, os, sys, time, urllib.request
        grace = {{ int .Values.relay.drain.graceSeconds }}
        host, port = os.environ["APEXMESH_RELAY_HTTP_HOST"], os.environ["APEXMESH_RELAY_HTTP_PORT"]
        url = "http://%s:%s/admin/v1/drain" % ("[%s]" % host if ":" in host else host, port)
        auth = {"Authorization": "Bearer " + os.environ["APEXMESH_ADMIN_TOKEN"]}
        def call(method):
            request = urllib.request.Request(url, method=method, headers=auth)
            with urllib.request.urlopen(request, timeout=5) as answer:
                return json.load(answer)["sessions"]
        try:
            sessions = call("POST")
        except Exception as exc:
            sys.exit("drain refused: %s" % exc)
        deadline = time.monotonic() + grace
        while sessions and time.monotonic() < deadline:
            time.sleep(1)
            try:
                sessions = call("GET")
            except Exception:
                break
{{- end -}}

{{/* ------------------------------------------------------------------ pubsub */}}

{{/*
The Lease names of pubsub's leader election, one per domain: apexmesh/pubsub/lease.py's
lease_name (prefix-pubsub-domain, lower case, runs of other characters made one "-").
*/}}
{{- define "apex-mesh.pubsub.leaseNames" -}}
{{- $names := list -}}
{{- range .Values.domains -}}
{{- $name := printf "%s-pubsub-%s" $.Values.redisPrefix . | lower -}}
{{- $name = regexReplaceAll "[^a-z0-9-]+" $name "-" -}}
{{- $name = regexReplaceAll "-{2,}" $name "-" | trimAll "-" | trunc 253 | trimSuffix "-" -}}
{{- $names = append $names $name -}}
{{- end -}}
{{- toYaml $names -}}
{{- end -}}

{{/* ------------------------------------------------------------------ dashboard */}}

{{- define "apex-mesh.dashboard.contextSecretName" -}}
{{- default (printf "%s-context" (include "apex-mesh.componentName" (dict "root" . "component" "dashboard"))) .Values.dashboard.existingContextSecret -}}
{{- end -}}

{{/*
What the dashboard reads: one entry per Service of a deployed component, its admin API
on the Service's http port (the relays' is relay-internal: the edge Service carries
BEEP only), in apexmesh/ops/targets.py's form. Every pod serves every domain, so each
entry names the first, as apexctl's Kubernetes contexts do.
*/}}
{{- define "apex-mesh.dashboard.targets" -}}
{{- $targets := list -}}
{{- range $component := list "relay" "access" "pubsub" "report" "presence" -}}
{{- $v := index $.Values $component -}}
{{- if or (not (hasKey $v "enabled")) $v.enabled -}}
{{- $service := ternary "relay-internal" $component (eq $component "relay") -}}
{{- $address := include "apex-mesh.address" (dict "root" $ "component" $service "port" $v.ports.http) -}}
{{- $targets = append $targets (dict
  "name" (include "apex-mesh.componentName" (dict "root" $ "component" $service))
  "service" $component
  "domain" (first $.Values.domains)
  "admin_url" (printf "http://%s" $address)) -}}
{{- end -}}
{{- end -}}
{{- toYaml $targets -}}
{{- end -}}

{{/*
The dashboard's context file (apexctl.yaml): the release's Services and no token; the
dashboard reads them with its own token, the admin Secret's read-token
(services/dashboard/settings.py), so nothing here needs a lookup or goes stale when the
tokens are rotated.
*/}}
{{- define "apex-mesh.dashboard.context" -}}
apiVersion: apexctl/v1
kind: local
name: {{ printf "%s/%s" (include "apex-mesh.namespace" .) .Release.Name | quote }}
services:
  {{- include "apex-mesh.dashboard.targets" . | nindent 2 }}
{{- end -}}

{{/* ------------------------------------------------------------------ pods */}}

{{/* Environment every service pod gets (its own address, name, namespace) and, unless
(dict "root" $ "adminTokens" false), the admin API's tokens. */}}
{{- define "apex-mesh.podEnv" -}}
{{- $root := .root -}}
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: APEXMESH_SHUTDOWN_GRACE
  value: {{ $root.Values.shutdownGraceSeconds | quote }}
- name: APEXMESH_LOG_LEVEL
  value: {{ $root.Values.logLevel | quote }}
{{- if .adminTokens }}
- name: APEXMESH_ADMIN_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ include "apex-mesh.adminSecretName" $root }}
      key: admin-token
- name: APEXMESH_ADMIN_READ_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ include "apex-mesh.adminSecretName" $root }}
      key: read-token
{{- end }}
{{- end -}}

{{/* The Secret holding the admin API's tokens (admin-secret.yaml, or the user's). */}}
{{- define "apex-mesh.adminSecretName" -}}
{{- default (include "apex-mesh.componentName" (dict "root" . "component" "admin")) .Values.admin.existingSecret -}}
{{- end -}}

{{/* Admin HTTP probes on the named port "http": startup and liveness /healthz (the
process answers; never Redis), readiness /readyz (its dependencies answer). */}}
{{- define "apex-mesh.probes" -}}
startupProbe:
  httpGet:
    path: /healthz
    port: http
  periodSeconds: 2
  failureThreshold: 60
readinessProbe:
  httpGet:
    path: /readyz
    port: http
  periodSeconds: 10
  timeoutSeconds: 3
  failureThreshold: 3
livenessProbe:
  httpGet:
    path: /healthz
    port: http
  periodSeconds: 20
  timeoutSeconds: 3
  failureThreshold: 3
{{- end -}}

{{/*
One apex-mesh service as a Deployment: the named template every gRPC service uses. The
component's initContainers, sidecars, extraVolumes and extraVolumeMounts (values, templated
with tpl) go in after the chart's own.
Call with a dict:
  root          $
  component     relay | access | pubsub | report | presence | ...
  values        the component's values (replicaCount, image, ports, resources, ...);
                ports.grpc may be absent (the dashboard serves HTTP only)
  env           extra container env (a YAML list string)
  adminTokens   false: the admin API's tokens stay out of the pod (default: in)
  lifecycle     the container's lifecycle hooks (a YAML mapping string)
  volumes       extra volumes (YAML list string), volumeMounts likewise
  redisClient   true when the pods talk to Redis (env, label for the NetworkPolicy)
  apiAccess     true when the pods call the Kubernetes API: only then is the token of
                their ServiceAccount (values.serviceAccount) mounted
  annotations   extra pod annotations (checksums)
  extraPorts    more container ports (YAML list string)
*/}}
{{- define "apex-mesh.deployment" -}}
{{- $root := .root -}}
{{- $v := .values -}}
{{- $ctx := dict "root" $root "component" .component -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  {{- include "apex-mesh.metadata" $ctx | nindent 2 }}
spec:
  {{- if not (and $v.autoscaling $v.autoscaling.enabled) }}
  replicas: {{ $v.replicaCount }}
  {{- end }}
  revisionHistoryLimit: 5
  selector:
    matchLabels:
      {{- include "apex-mesh.selectorLabels" $ctx | nindent 6 }}
  strategy:
    type: RollingUpdate
    rollingUpdate:
      maxSurge: 1
      maxUnavailable: 0
  template:
    metadata:
      labels:
        {{- include "apex-mesh.labels" $ctx | nindent 8 }}
        {{- if .redisClient }}
        apex-mesh.io/redis-client: "true"
        {{- end }}
        {{- with $v.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      annotations:
        kubectl.kubernetes.io/default-container: {{ .component }}
        {{- with .annotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
        {{- with $v.podAnnotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
    spec:
      {{- include "apex-mesh.imagePullSecrets" $root | nindent 6 }}
      serviceAccountName: {{ include "apex-mesh.serviceAccountName" (dict "root" $root "component" .component "values" $v) }}
      automountServiceAccountToken: {{ if .apiAccess }}true{{ else }}false{{ end }}
      enableServiceLinks: false
      securityContext:
        {{- toYaml $root.Values.podSecurityContext | nindent 8 }}
      terminationGracePeriodSeconds: {{ $v.terminationGracePeriodSeconds }}
      {{- with $v.priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
      {{- with $v.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- if $v.topologySpreadConstraints }}
      topologySpreadConstraints:
        {{- tpl (toYaml $v.topologySpreadConstraints) $root | nindent 8 }}
      {{- else }}
      topologySpreadConstraints:
        - maxSkew: 1
          topologyKey: kubernetes.io/hostname
          whenUnsatisfiable: ScheduleAnyway
          labelSelector:
            matchLabels:
              {{- include "apex-mesh.selectorLabels" $ctx | nindent 14 }}
      {{- end }}
      {{- with (include "apex-mesh.extra" (dict "root" $root "list" $v.initContainers)) }}
      initContainers:
        {{- . | nindent 8 }}
      {{- end }}
      containers:
        - name: {{ .component }}
          image: {{ include "apex-mesh.image" (dict "root" $root "image" $v.image) }}
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          securityContext:
            {{- toYaml $root.Values.containerSecurityContext | nindent 12 }}
          ports:
            {{- if $v.ports.grpc }}
            - name: grpc
              containerPort: {{ $v.ports.grpc }}
              protocol: TCP
            {{- end }}
            - name: http
              containerPort: {{ $v.ports.http }}
              protocol: TCP
            {{- with .extraPorts }}
            {{- . | nindent 12 }}
            {{- end }}
          env:
            {{- include "apex-mesh.podEnv" (dict "root" $root "adminTokens" (or (not (hasKey . "adminTokens")) .adminTokens)) | nindent 12 }}
            {{- if .redisClient }}
            {{- include "apex-mesh.redis.env" $root | nindent 12 }}
            {{- end }}
            {{- with .env }}
            {{- . | nindent 12 }}
            {{- end }}
            {{- with $v.extraEnv }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          {{- include "apex-mesh.probes" $root | nindent 10 }}
          {{- with .lifecycle }}
          lifecycle:
            {{- . | nindent 12 }}
          {{- end }}
          resources:
            {{- toYaml $v.resources | nindent 12 }}
          volumeMounts:
            - name: tmp
              mountPath: /tmp
            {{- if .redisClient }}
            {{- include "apex-mesh.redis.caMount" $root | nindent 12 }}
            {{- end }}
            {{- with .volumeMounts }}
            {{- . | nindent 12 }}
            {{- end }}
            {{- with (include "apex-mesh.extra" (dict "root" $root "list" $v.extraVolumeMounts)) }}
            {{- . | nindent 12 }}
            {{- end }}
        {{- with (include "apex-mesh.extra" (dict "root" $root "list" $v.sidecars)) }}
        {{- . | nindent 8 }}
        {{- end }}
      volumes:
        - name: tmp
          emptyDir:
            sizeLimit: 64Mi
        {{- if .redisClient }}
        {{- include "apex-mesh.redis.caVolume" $root | nindent 8 }}
        {{- end }}
        {{- with .volumes }}
        {{- . | nindent 8 }}
        {{- end }}
        {{- with (include "apex-mesh.extra" (dict "root" $root "list" $v.extraVolumes)) }}
        {{- . | nindent 8 }}
        {{- end }}
{{- end -}}

{{/*
A list from values (initContainers, sidecars, extraVolumes, extraVolumeMounts) as YAML
list items, templated with tpl so entries may name the release ({{ .Release.Name }});
empty when the list is. (dict "root" $ "list" LIST)
*/}}
{{- define "apex-mesh.extra" -}}
{{- with .list }}{{ tpl (toYaml .) $.root }}{{ end -}}
{{- end -}}

{{/*
The ServiceAccount a component's pods run as: FULLNAME-<component>, or values.serviceAccount.name,
when the chart makes it (serviceAccount.create); otherwise serviceAccount.name, or the
namespace's "default". Independent of rbac.create, which only makes the Roles and their
bindings. (dict "root" $ "component" C "values" V)
*/}}
{{- define "apex-mesh.serviceAccountName" -}}
{{- $account := .values.serviceAccount -}}
{{- if $account.create -}}
{{- default (include "apex-mesh.componentName" (dict "root" .root "component" .component)) $account.name -}}
{{- else -}}
{{- default "default" $account.name -}}
{{- end -}}
{{- end -}}

{{/*
The ClusterIP Service of a gRPC service: grpc and http ports, scraped by the ServiceMonitor.
(dict "root" $ "component" C "values" V)
*/}}
{{- define "apex-mesh.service" -}}
{{- $ctx := dict "root" .root "component" .component -}}
apiVersion: v1
kind: Service
metadata:
  name: {{ include "apex-mesh.componentName" $ctx }}{{ .suffix | default "" }}
  namespace: {{ include "apex-mesh.namespace" .root }}
  labels:
    {{- include "apex-mesh.labels" $ctx | nindent 4 }}
    apex-mesh.io/scrape: {{ not .headless | quote }}
  {{- include "apex-mesh.annotations" .root | nindent 2 }}
spec:
  type: ClusterIP
  {{- if .headless }}
  clusterIP: None
  publishNotReadyAddresses: false
  {{- end }}
  selector:
    {{- include "apex-mesh.selectorLabels" $ctx | nindent 4 }}
  ports:
    - name: grpc
      port: {{ .values.ports.grpc }}
      targetPort: grpc
      protocol: TCP
      appProtocol: grpc
    - name: http
      port: {{ .values.ports.http }}
      targetPort: http
      protocol: TCP
      appProtocol: http
{{- end -}}

{{/*
A PodDisruptionBudget when the component runs more than one pod (or autoscales).
(dict "root" $ "component" C "values" V)
*/}}
{{- define "apex-mesh.pdb" -}}
{{- $v := .values -}}
{{- $scaled := and $v.autoscaling $v.autoscaling.enabled -}}
{{- if and $v.pdb.enabled (or $scaled (gt (int $v.replicaCount) 1)) }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  {{- include "apex-mesh.metadata" (dict "root" .root "component" .component) | nindent 2 }}
spec:
  {{- if not (kindIs "invalid" $v.pdb.minAvailable) }}
  minAvailable: {{ $v.pdb.minAvailable }}
  {{- else }}
  maxUnavailable: {{ $v.pdb.maxUnavailable | default 1 }}
  {{- end }}
  selector:
    matchLabels:
      {{- include "apex-mesh.selectorLabels" (dict "root" .root "component" .component) | nindent 6 }}
{{- end }}
{{- end -}}

{{/*
A HorizontalPodAutoscaler for a component's Deployment: CPU, an optional per-pod custom
metric, and metrics passed through. (dict "root" $ "component" C "values" V)
*/}}
{{- define "apex-mesh.hpa" -}}
{{- $a := .values.autoscaling -}}
{{- if $a.enabled }}
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  {{- include "apex-mesh.metadata" (dict "root" .root "component" .component) | nindent 2 }}
spec:
  scaleTargetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: {{ include "apex-mesh.componentName" (dict "root" .root "component" .component) }}
  minReplicas: {{ $a.minReplicas }}
  maxReplicas: {{ $a.maxReplicas }}
  metrics:
    {{- if $a.targetCPUUtilizationPercentage }}
    - type: Resource
      resource:
        name: cpu
        target:
          type: Utilization
          averageUtilization: {{ $a.targetCPUUtilizationPercentage }}
    {{- end }}
    {{- if $a.customMetric.enabled }}
    - type: Pods
      pods:
        metric:
          name: {{ $a.customMetric.name }}
        target:
          type: AverageValue
          averageValue: {{ $a.customMetric.targetAverageValue | quote }}
    {{- end }}
    {{- with $a.metrics }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with $a.behavior }}
  behavior:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
{{- end -}}

{{/* The snapshot job's S3 credentials from snapshot.s3.existingSecret (the job and its
executors): env entries, nothing when the pods use their own identity. */}}
{{- define "apex-mesh.snapshot.s3Env" -}}
{{- $s3 := .Values.snapshot.s3 -}}
{{- if and (hasPrefix "s3a://" .Values.snapshot.storage) $s3.existingSecret }}
- name: AWS_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ $s3.existingSecret }}
      key: {{ $s3.accessKeyIdKey }}
- name: AWS_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ $s3.existingSecret }}
      key: {{ $s3.secretAccessKeyKey }}
{{- end }}
{{- end -}}
