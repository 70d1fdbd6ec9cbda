{{/*
Value combinations that cannot work fail the render with a message saying what to change
(the schema checks each value alone; these check them together).
*/}}
{{- define "apex-mesh.validate" -}}
{{- $errors := list -}}
{{- if not .Values.domains -}}
{{- $errors = append $errors "domains: name at least one administrative domain" -}}
{{- end -}}
{{- if and (not .Values.redis.enabled) (not .Values.externalRedis.host) -}}
{{- $errors = append $errors "externalRedis.host: required when redis.enabled is false" -}}
{{- end -}}
{{- if and (not .Values.redis.enabled) (not .Values.externalRedis.existingSecret) -}}
{{- $errors = append $errors "externalRedis.existingSecret: a Secret with the Redis password is required (services refuse a Redis without TLS or password)" -}}
{{- end -}}
{{- if and (eq .Values.relay.tls.mode "secret") (not .Values.relay.tls.existingSecret) -}}
{{- $errors = append $errors "relay.tls.existingSecret: required when relay.tls.mode is secret" -}}
{{- end -}}
{{- if and (eq .Values.relay.tls.mode "certManager") (not .Values.relay.tls.certManager.issuerRef.name) -}}
{{- $errors = append $errors "relay.tls.certManager.issuerRef.name: required when relay.tls.mode is certManager" -}}
{{- end -}}
{{- range $name := list "relay" "pubsub" -}}
{{- $a := (index $.Values $name).autoscaling -}}
{{- if and $a.enabled (gt (int $a.minReplicas) (int $a.maxReplicas)) -}}
{{- $errors = append $errors (printf "%s.autoscaling: minReplicas (%v) is above maxReplicas (%v)" $name $a.minReplicas $a.maxReplicas) -}}
{{- end -}}
{{- if and $a.enabled (not $a.targetCPUUtilizationPercentage) (not $a.customMetric.enabled) (not $a.metrics) -}}
{{- $errors = append $errors (printf "%s.autoscaling: enabled without any metric" $name) -}}
{{- end -}}
{{- end -}}
{{- range $name := list "relay" "access" "pubsub" "report" "presence" "dashboard" -}}
{{- $v := index $.Values $name -}}
{{- if le (int $v.terminationGracePeriodSeconds) (int $.Values.shutdownGraceSeconds) -}}
{{- $errors = append $errors (printf "%s.terminationGracePeriodSeconds (%v) must be longer than shutdownGraceSeconds (%v)" $name $v.terminationGracePeriodSeconds $.Values.shutdownGraceSeconds) -}}
{{- end -}}
{{- end -}}
{{- $drain := .Values.relay.drain -}}
{{- $needed := add (int $drain.graceSeconds) (int .Values.shutdownGraceSeconds) 10 -}}
{{- if and $drain.enabled (lt (int .Values.relay.terminationGracePeriodSeconds) (int $needed)) -}}
{{- $errors = append $errors (printf "relay.terminationGracePeriodSeconds (%v) must be at least relay.drain.graceSeconds (%v) + shutdownGraceSeconds (%v) + 10 = %v: the preStop drain and the shutdown count against it" .Values.relay.terminationGracePeriodSeconds $drain.graceSeconds .Values.shutdownGraceSeconds $needed) -}}
{{- end -}}
{{- if and .Values.tests.enabled .Values.relay.sasl.existingSecret (not .Values.tests.existingSecret) -}}
{{- $errors = append $errors "tests.existingSecret: with relay.sasl.existingSecret, name a Secret with the test endpoint's identity and password (or set tests.enabled=false)" -}}
{{- end -}}
{{- $snap := .Values.snapshot -}}
{{- if and $snap.enabled (hasPrefix "k8s://" $snap.master) (not (hasPrefix "s3a://" $snap.storage)) (not (and $snap.persistence.enabled (has "ReadWriteMany" $snap.persistence.accessModes))) -}}
{{- $errors = append $errors "snapshot.master k8s://: executor pods must reach the snapshot storage: set snapshot.storage to an s3a:// URL, or snapshot.persistence.accessModes to [ReadWriteMany]" -}}
{{- end -}}
{{- if $errors -}}
{{- fail (printf "\nvalues cannot work together:\n  - %s" (join "\n  - " $errors)) -}}
{{- end -}}
{{- end -}}
