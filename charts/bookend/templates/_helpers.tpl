{{/* The name part of every object: "bookend" unless overridden. */}}
{{- define "bookend.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The full name. A release called "bookend" (the documented one) gives plain "bookend", the
names deploy/ uses. */}}
{{- define "bookend.fullname" -}}
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

{{- define "bookend.selectorLabels" -}}
app.kubernetes.io/name: {{ include "bookend.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: webhook
{{- end }}

{{- define "bookend.labels" -}}
app.kubernetes.io/name: {{ include "bookend.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: bookend
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "bookend.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "bookend.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "bookend.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{- define "bookend.tlsSecretName" -}}
{{- default (printf "%s-tls" (include "bookend.fullname" .)) .Values.tls.secretName }}
{{- end }}

{{/* The Service's DNS names: what the API server dials, and what the certificate must name. */}}
{{- define "bookend.serviceDNSNames" -}}
{{- $svc := printf "%s.%s.svc" (include "bookend.fullname" .) .Release.Namespace }}
{{- list $svc (printf "%s.cluster.local" $svc) | toJson }}
{{- end }}

{{/* The user name of Tekton's controller, in the webhook's matchCondition and in
--tekton-controller, which bookend checks again (they must be equal). */}}
{{- define "bookend.tektonController" -}}
{{- with .Values.tekton.controllerServiceAccount }}
{{- printf "system:serviceaccount:%s:%s" .namespace .name }}
{{- end }}
{{- end }}

{{/* Name of both webhook configurations. The API server runs mutating configurations sorted
by name: bookend must come before Tekton's webhook.pipeline.tekton.dev (docs/install.md,
"Order with Tekton's webhooks"). */}}
{{- define "bookend.webhookConfigurationName" -}}
{{- $fullname := include "bookend.fullname" . }}
{{- $name := ternary "bookend.dev" (printf "%s.bookend.dev" $fullname) (eq $fullname "bookend") }}
{{- if not (lt $name "webhook.pipeline.tekton.dev") }}
{{- fail (printf "the webhook configuration name %q must sort before Tekton's \"webhook.pipeline.tekton.dev\": choose a release name (or fullnameOverride) that does" $name) }}
{{- end }}
{{- $name }}
{{- end }}

{{/* clientConfig of a webhook: the Service, or webhook.url for development and tests. */}}
{{- define "bookend.clientConfig" -}}
{{- $root := index . 0 }}
{{- $path := index . 1 }}
{{- if $root.Values.webhook.url }}
url: {{ printf "%s%s" (trimSuffix "/" $root.Values.webhook.url) $path | quote }}
{{- else }}
service:
  namespace: {{ $root.Release.Namespace }}
  name: {{ include "bookend.fullname" $root }}
  path: {{ $path }}
  port: 443
{{- end }}
{{- with include "bookend.caBundle" $root }}
caBundle: {{ . }}
{{- end }}
{{- end }}

{{/* The namespaceSelector of the TaskRun webhooks: never the release namespace and
kube-system (bookend's own pods must start while it is down), plus what the values add. */}}
{{- define "bookend.namespaceSelector" -}}
{{- $excluded := concat (list .Release.Namespace "kube-system") .Values.webhook.excludedNamespaces | uniq }}
{{- $expressions := prepend .Values.webhook.namespaceSelector.matchExpressions (dict "key" "kubernetes.io/metadata.name" "operator" "NotIn" "values" $excluded) }}
namespaceSelector:
  {{- with .Values.webhook.namespaceSelector.matchLabels }}
  matchLabels:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  matchExpressions:
    {{- range $expressions }}
    - key: {{ .key }}
      operator: {{ .operator }}
      {{- with .values }}
      values: {{ toJson . | replace "\",\"" "\", \"" }}
      {{- end }}
    {{- end }}
{{- end }}

{{/* The generated certificate (tls.generate without cert-manager), as a dict: caCrt, caKey,
caNotAfter, crt, key, notAfter (PEM, Unix seconds). Computed once per render and shared by the
Secrets and the webhook configurations (memoized in .Values, which every template shares).

Kept across upgrades: what `lookup` finds in the cluster is reused. The CA key is generated once
and never changes; the CA certificate is re-issued with that same key (and subject) when an
upgrade runs within caRenewBeforeDays of its expiry, so serving certificates it signed before
still verify. The serving certificate is re-issued (new key) when an upgrade runs within
renewBeforeDays of its expiry, when its Secret is gone, or when the CA key is new; the bundle
stays the CA. Under
`helm template` (no cluster) lookup finds nothing and everything is new on every render. */}}
{{- define "bookend.tls" -}}
{{- if not (hasKey .Values "__bookendTLS") }}
{{- $now := now.Unix }}
{{- $fullname := include "bookend.fullname" . }}
{{- $caSecret := lookup "v1" "Secret" .Release.Namespace (printf "%s-ca" $fullname) }}
{{- $tlsSecret := lookup "v1" "Secret" .Release.Namespace (include "bookend.tlsSecretName" .) }}
{{- $out := dict }}
{{- /* The CA */}}
{{- $caKey := "" }}
{{- if and $caSecret $caSecret.data (index $caSecret.data "tls.key") }}
{{- $caKey = index $caSecret.data "tls.key" | b64dec }}
{{- end }}
{{- $caNotAfter := 0 }}
{{- if $caKey }}
{{- $caNotAfter = int64 (index ($caSecret.metadata.annotations | default dict) "bookend.dev/not-after" | default "0") }}
{{- end }}
{{- if and $caKey (gt $caNotAfter (add $now (mul .Values.tls.caRenewBeforeDays 86400))) }}
{{- $_ := set $out "caCrt" (index $caSecret.data "tls.crt" | b64dec) }}
{{- else }}
{{- if not $caKey }}
{{- $caKey = genPrivateKey "ecdsa" }}
{{- $_ := set $out "newCAKey" true }}
{{- end }}
{{- $ca := genCAWithKey (printf "%s-ca" $fullname) (int .Values.tls.caValidityDays) $caKey }}
{{- $_ := set $out "caCrt" $ca.Cert }}
{{- $caNotAfter = add $now (mul .Values.tls.caValidityDays 86400) }}
{{- end }}
{{- $_ := set $out "caKey" $caKey }}
{{- $_ := set $out "caNotAfter" $caNotAfter }}
{{- /* The serving certificate */}}
{{- $notAfter := 0 }}
{{- if and $tlsSecret $tlsSecret.data (index $tlsSecret.data "tls.key") }}
{{- $notAfter = int64 (index ($tlsSecret.metadata.annotations | default dict) "bookend.dev/not-after" | default "0") }}
{{- end }}
{{- /* A new CA key cannot verify a serving certificate its predecessor signed. */}}
{{- if and (not $out.newCAKey) (gt $notAfter (add $now (mul .Values.tls.renewBeforeDays 86400))) }}
{{- $_ := set $out "crt" (index $tlsSecret.data "tls.crt" | b64dec) }}
{{- $_ := set $out "key" (index $tlsSecret.data "tls.key" | b64dec) }}
{{- else }}
{{- $dns := include "bookend.serviceDNSNames" . | fromJsonArray }}
{{- $ips := list }}
{{- with .Values.webhook.url }}
{{- $host := regexReplaceAll "^https://(\\[([^\\]]+)\\]|([^/:]+))(:[0-9]+)?(/.*)?$" . "${2}${3}" }}
{{- if regexMatch "^[0-9.]+$|:" $host }}
{{- $ips = append $ips $host }}
{{- else }}
{{- $dns = append $dns $host }}
{{- end }}
{{- end }}
{{- $signer := buildCustomCert ($out.caCrt | b64enc) ($caKey | b64enc) }}
{{- $cert := genSignedCertWithKey (first $dns) $ips $dns (int .Values.tls.certValidityDays) $signer (genPrivateKey "ecdsa") }}
{{- $_ := set $out "crt" $cert.Cert }}
{{- $_ := set $out "key" $cert.Key }}
{{- $notAfter = add $now (mul .Values.tls.certValidityDays 86400) }}
{{- end }}
{{- $_ := set $out "notAfter" $notAfter }}
{{- $_ := set .Values "__bookendTLS" $out }}
{{- end }}
{{- toJson (get .Values "__bookendTLS") }}
{{- end }}

{{/* caBundle of every webhook: cert-manager's cainjector fills it (the annotation), else the
generated CA, else tls.caBundle; empty means "leave the field out" (a declared value would be
reset by every apply, breaking what certs/install-dev-certs.sh set). */}}
{{- define "bookend.caBundle" -}}
{{- if not .Values.certManager.enabled }}
{{- if .Values.tls.generate }}
{{- (include "bookend.tls" . | fromJson).caCrt | b64enc }}
{{- else }}
{{- .Values.tls.caBundle }}
{{- end }}
{{- end }}
{{- end }}
