{{/* Labels every object gets, besides the app.kubernetes.io/name of its component. */}}
{{- define "kf.labels" -}}
app.kubernetes.io/part-of: kueue-federation
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{- define "kf.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* One process's Configuration: the component's config merged over what the release decides. */}}
{{- define "kf.configuration" -}}
{{- $root := index . 0 -}}
{{- $component := index . 1 -}}
{{- $base := dict
  "apiVersion" "config.kueue.x-k8s.io/v1beta1"
  "kind" "Configuration"
  "namespace" $root.Release.Namespace
  "metrics" (dict "bindAddress" (printf ":%v" $root.Values.metrics.port))
  "health" (dict "healthProbeBindAddress" (printf ":%v" $component.healthPort))
-}}
{{- $gates := dict -}}
{{- range $gate, $on := $root.Values.featureGates }}{{ $_ := set $gates $gate $on }}{{ end -}}
{{- range $gate, $on := $component.featureGates }}{{ $_ := set $gates $gate $on }}{{ end -}}
{{- if $gates }}{{ $_ := set $base "featureGates" $gates }}{{ end -}}
{{- include "kf.deepMerge" (list $base (deepCopy ($component.config | default dict))) -}}
{{- toYaml $base -}}
{{- end }}

{{/* Merges map index . 1 into map index . 0 in place; unlike sprig's mergeOverwrite, a false or 0
in the second one wins too. Lists are replaced. */}}
{{- define "kf.deepMerge" -}}
{{- $dst := index . 0 -}}
{{- range $key, $value := index . 1 -}}
{{- if and (kindIs "map" $value) (kindIs "map" (get $dst $key)) -}}
{{- include "kf.deepMerge" (list (get $dst $key) $value) -}}
{{- else -}}
{{- $_ := set $dst $key $value -}}
{{- end -}}
{{- end -}}
{{- end }}

{{/* imagePullSecrets, nodeSelector, tolerations and affinity of a pod spec (indented 6). */}}
{{- define "kf.podPlacement" -}}
{{- $root := index . 0 -}}
{{- $component := index . 1 -}}
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets:
{{- toYaml . | nindent 2 }}
{{- end }}
{{- with $component.nodeSelector }}
nodeSelector:
{{- toYaml . | nindent 2 }}
{{- end }}
{{- with $component.tolerations }}
tolerations:
{{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* Rules added to a process's ClusterRole when metrics are served over HTTPS with delegated auth. */}}
{{- define "kf.metricsAuthRules" -}}
{{- if eq .Values.metrics.scheme "https" }}
# Authenticating and authorizing scrapes of the HTTPS metrics endpoint.
- apiGroups: ["authentication.k8s.io"]
  resources: ["tokenreviews"]
  verbs: ["create"]
- apiGroups: ["authorization.k8s.io"]
  resources: ["subjectaccessreviews"]
  verbs: ["create"]
{{- end }}
{{- end }}

{{/* The metrics Services' port name: `https` when metrics are served over TLS, as deploy/ names it. */}}
{{- define "kf.metricsPortName" -}}
{{- if eq .Values.metrics.scheme "https" }}https{{ else }}metrics{{ end }}
{{- end }}
