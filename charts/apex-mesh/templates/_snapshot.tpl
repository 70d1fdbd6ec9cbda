{{/*
Where the snapshot volume is mounted, in the job's pod and in executor pods: at
snapshot.storage itself when that is a directory, so that the storage the job writes
(the exported events and the previous snapshot an incremental run starts from,
docs/snapshot.md) is always on the volume and outlives the pod. An s3a:// storage keeps
its state in the bucket; the volume then sits at the image's default directory.
*/}}
{{- define "apex-mesh.snapshot.mountPath" -}}
{{- $storage := .Values.snapshot.storage -}}
{{- if hasPrefix "s3a://" $storage -}}
/var/lib/apex-mesh/snapshots
{{- else -}}
{{- trimSuffix "/" (trimPrefix "file://" $storage) -}}
{{- end -}}
{{- end -}}
