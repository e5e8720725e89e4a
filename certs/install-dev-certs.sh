#!/usr/bin/env bash
# Serving certificate for bookend without cert-manager: `bookend certs --host
# bookend.bookend-system.svc --host bookend.bookend-system.svc.cluster.local` makes a private CA
# and a certificate for the Service, this script stores them in the Secret `bookend-tls` and puts
# the CA into `caBundle` of every webhook in the `bookend.dev` webhook configurations.
#
# Usage: certs/install-dev-certs.sh [MODE] [OPTIONS]
#
# Modes:
#   (none)          Install or repair. Creates the Secret when it is missing; makes sure every
#                   webhook trusts the Secret's CA (run it again after re-creating the webhook
#                   configurations). CAs already in the bundle are kept. Without the webhook
#                   configurations (staged install) it only creates the Secret.
#   --rotate        New CA and serving certificate, without a failed request:
#                     1. caBundle := old CA(s) + new CA   (the API server trusts both)
#                     2. Secret   := new certificate      (pods reload it within ~1-2 minutes)
#                   then, later, --prune-old-ca.
#   --prune-old-ca  caBundle := the Secret's CA only. Refused until every bookend pod presents
#                   the Secret's certificate (checked through `kubectl port-forward` + openssl),
#                   or, when that cannot be checked, until the Secret is --min-age old.
#
# Options:
#   --namespace NS     namespace of the Service and the Secret   (default bookend-system)
#   --service NAME     Service called by the webhooks            (default bookend)
#   --secret NAME      TLS Secret mounted by the Deployment      (default bookend-tls)
#   --config NAME      name of both webhook configurations       (default bookend.dev)
#   --days N           validity of the serving certificate       (default: bookend certs' own)
#   --min-age SECONDS  --prune-old-ca fallback wait              (default 180)
#   --force            skip the safety checks (cert-manager annotation, pod check, age)
#   -h, --help
#
# Environment: BOOKEND (the bookend binary; default `bookend` on PATH, else target/release or
# target/debug of this repository), KUBECTL (default kubectl; its current context is used).
#
# The CA key is not stored anywhere: a rotation makes a new CA, which is why the bundle carries
# old and new during the overlap. The serving certificate's key lives only in the Secret.
set -euo pipefail

NAMESPACE=bookend-system
SERVICE=bookend
SECRET=bookend-tls
CONFIG=bookend.dev
DAYS=
MIN_AGE=180
FORCE=0
MODE=install
KUBECTL=${KUBECTL:-kubectl}
KINDS=(mutatingwebhookconfiguration validatingwebhookconfiguration)
ANNOTATION=bookend.dev/issued-at

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }
die() { echo "install-dev-certs: $*" >&2; exit 1; }
say() { echo "install-dev-certs: $*" >&2; }

while (($#)); do
  case $1 in
    --rotate) MODE=rotate ;;
    --prune-old-ca) MODE=prune ;;
    --namespace) NAMESPACE=${2:?--namespace needs a value}; shift ;;
    --service) SERVICE=${2:?--service needs a value}; shift ;;
    --secret) SECRET=${2:?--secret needs a value}; shift ;;
    --config) CONFIG=${2:?--config needs a value}; shift ;;
    --days) DAYS=${2:?--days needs a value}; shift ;;
    --min-age) MIN_AGE=${2:?--min-age needs a value}; shift ;;
    --force) FORCE=1 ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument: $1" ;;
  esac
  shift
done

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
find_bookend() {
  if [[ -n ${BOOKEND:-} ]]; then echo "$BOOKEND"; return; fi
  if command -v bookend >/dev/null 2>&1; then command -v bookend; return; fi
  for b in "$REPO/target/release/bookend" "$REPO/target/debug/bookend"; do
    if [[ -x $b ]]; then echo "$b"; return; fi
  done
  die "no bookend binary: set BOOKEND, put bookend on PATH, or cargo build"
}

k() { "$KUBECTL" "$@"; }
command -v "$KUBECTL" >/dev/null 2>&1 || die "$KUBECTL not found (set KUBECTL)"

TMP=$(mktemp -d)
cleanup() {
  [[ -n ${PF_PID:-} ]] && kill "$PF_PID" 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT

b64() { base64 | tr -d '\n'; }
if base64 -d </dev/null >/dev/null 2>&1; then
  unb64() { base64 -d; }
else
  unb64() { base64 -D; } # older macOS
fi

# Prints the certificates of the PEM files given, each once, in the order first seen.
# Blank lines and text outside BEGIN/END blocks are dropped.
pem_union() {
  awk '
    /-----BEGIN CERTIFICATE-----/ { block = ""; inside = 1 }
    inside { line = $0; gsub(/^[ \t]+|[ \t\r]+$/, "", line); if (line != "") block = block line "\n" }
    /-----END CERTIFICATE-----/ {
      inside = 0
      if (!(block in seen)) { seen[block] = 1; printf "%s", block }
    }
  ' "$@"
}

count_certs() { grep -c -- '-----BEGIN CERTIFICATE-----' "$1" || true; }

# Refuses a bundle that would not verify the certificate the pods serve (or are about to).
check_bundle() { # $1 = bundle PEM, $2 = serving certificate PEM
  (($(count_certs "$1") > 0)) || die "refusing an empty caBundle"
  command -v openssl >/dev/null 2>&1 || return 0
  openssl verify -CAfile "$1" "$2" >/dev/null 2>&1 ||
    die "refusing a caBundle that does not verify the serving certificate $2"
}

# The webhook configurations must not be managed by cert-manager's cainjector, which would
# overwrite whatever this script writes. Returns 1 when they do not exist (yet).
check_configs() {
  local kind ann
  for kind in "${KINDS[@]}"; do
    k get "$kind" "$CONFIG" >/dev/null 2>&1 || return 1
    ann=$(k get "$kind" "$CONFIG" -o jsonpath='{.metadata.annotations.cert-manager\.io/inject-ca-from}')
    if [[ -n $ann && $FORCE != 1 ]]; then
      die "$kind/$CONFIG is managed by cert-manager (inject-ca-from: $ann); use the cert-manager overlay, or --force"
    fi
  done
}

# Writes every CA currently in any bookend webhook's caBundle to $1 (PEM, possibly empty).
current_bundle() {
  local out=$1 kind b
  : >"$out"
  for kind in "${KINDS[@]}"; do
    while IFS= read -r b; do
      if [[ -n $b ]]; then
        printf '%s' "$b" | unb64 >>"$out"
        echo >>"$out"
      fi
    done < <(k get "$kind" "$CONFIG" -o jsonpath='{range .webhooks[*]}{.clientConfig.caBundle}{"\n"}{end}')
  done
}

# Sets caBundle of every webhook in both configurations to the PEM file $1.
set_bundle() {
  local pem=$1 kind n i patch value
  value=$(b64 <"$pem")
  for kind in "${KINDS[@]}"; do
    n=$(k get "$kind" "$CONFIG" -o jsonpath='{range .webhooks[*]}{.name}{"\n"}{end}' | grep -c . || true)
    ((n > 0)) || die "$kind/$CONFIG has no webhooks"
    patch="["
    for ((i = 0; i < n; i++)); do
      if ((i > 0)); then patch+=","; fi
      patch+="{\"op\":\"add\",\"path\":\"/webhooks/$i/clientConfig/caBundle\",\"value\":\"$value\"}"
    done
    patch+="]"
    k patch "$kind" "$CONFIG" --type=json -p "$patch" >/dev/null
    say "$kind/$CONFIG: caBundle of $n webhook(s) set ($(count_certs "$pem") CA certificate(s))"
  done
}

secret_field() { # $1 = data key; prints the decoded value (empty if absent)
  local key=${1//./\\.}
  k -n "$NAMESPACE" get secret "$SECRET" -o jsonpath="{.data.$key}" 2>/dev/null | unb64
}

secret_exists() { k -n "$NAMESPACE" get secret "$SECRET" >/dev/null 2>&1; }

generate() { # new CA + serving certificate into $TMP/new
  local bookend args
  bookend=$(find_bookend)
  args=(certs --out-dir "$TMP/new" --host "$SERVICE.$NAMESPACE.svc" --host "$SERVICE.$NAMESPACE.svc.cluster.local")
  if [[ -n $DAYS ]]; then args+=(--days "$DAYS"); fi
  "$bookend" "${args[@]}" >&2 || die "$bookend certs failed"
  for f in ca.crt tls.crt tls.key; do
    [[ -s $TMP/new/$f ]] || die "bookend certs wrote no $f"
  done
  if command -v openssl >/dev/null 2>&1; then
    openssl verify -CAfile "$TMP/new/ca.crt" "$TMP/new/tls.crt" >/dev/null ||
      die "the new serving certificate does not verify against the new CA"
  fi
}

write_secret() { # the new pair into the Secret (server-side apply: no key copy in annotations)
  k -n "$NAMESPACE" create secret generic "$SECRET" --type=kubernetes.io/tls \
    --from-file=tls.crt="$TMP/new/tls.crt" --from-file=tls.key="$TMP/new/tls.key" \
    --from-file=ca.crt="$TMP/new/ca.crt" --dry-run=client -o yaml >"$TMP/secret.yaml"
  k annotate --local -f "$TMP/secret.yaml" "$ANNOTATION=$(date +%s)" -o yaml >"$TMP/secret-annotated.yaml"
  k apply --server-side --force-conflicts --field-manager=bookend-install-dev-certs \
    -f "$TMP/secret-annotated.yaml" >/dev/null
  say "secret/$SECRET in $NAMESPACE written (the pods reload it within ~1-2 minutes, no restart)"
}

fingerprint() { openssl x509 -noout -fingerprint -sha256 "$@" 2>/dev/null | cut -d= -f2; }

# 0 when every ready bookend pod presents the Secret's certificate, 1 when one does not,
# 2 when it cannot be checked (no openssl, no pods, port-forward refused).
pods_serve_secret_cert() {
  command -v openssl >/dev/null 2>&1 || return 2
  local want pods pod port got
  want=$(secret_field tls.crt | fingerprint) || return 2
  [[ -n $want ]] || return 2
  pods=$(k -n "$NAMESPACE" get pods -l app.kubernetes.io/name=bookend,app.kubernetes.io/component=webhook \
    -o jsonpath='{range .items[?(@.status.podIP)]}{.metadata.name}{"\n"}{end}' 2>/dev/null) || return 2
  [[ -n $pods ]] || return 2
  for pod in $pods; do
    port=$((20000 + RANDOM % 30000))
    k -n "$NAMESPACE" port-forward "pod/$pod" "$port:8443" >"$TMP/pf.log" 2>&1 &
    PF_PID=$!
    for _ in $(seq 50); do
      grep -q Forwarding "$TMP/pf.log" && break
      kill -0 "$PF_PID" 2>/dev/null || break
      sleep 0.1
    done
    got=$(openssl s_client -connect "127.0.0.1:$port" -servername "$SERVICE.$NAMESPACE.svc" </dev/null 2>/dev/null | fingerprint)
    kill "$PF_PID" 2>/dev/null || true
    wait "$PF_PID" 2>/dev/null || true
    PF_PID=
    [[ -n $got ]] || return 2
    if [[ $got != "$want" ]]; then
      say "pod $pod still presents another certificate"
      return 1
    fi
    say "pod $pod presents the Secret's certificate"
  done
  return 0
}

if ! check_configs; then
  # A staged install creates the Secret before the webhook configurations (docs/install.md).
  [[ $MODE == install ]] || die "webhook configurations $CONFIG not found: kubectl apply -k deploy/ first"
  if secret_exists; then
    say "secret/$SECRET exists; webhook configurations $CONFIG not found: apply them, then run this again"
  else
    generate
    write_secret
    say "webhook configurations $CONFIG not found yet: apply them, then run this again to set caBundle"
  fi
  exit 0
fi

case $MODE in
  install)
    current_bundle "$TMP/old.pem"
    if secret_exists; then
      secret_field ca.crt >"$TMP/ca.pem"
      [[ -s $TMP/ca.pem ]] || die "secret/$SECRET has no ca.crt; use --rotate to replace it"
      say "secret/$SECRET exists: keeping it, making sure the webhooks trust its CA"
      pem_union "$TMP/old.pem" "$TMP/ca.pem" >"$TMP/bundle.pem"
      secret_field tls.crt >"$TMP/served.crt"
      check_bundle "$TMP/bundle.pem" "$TMP/served.crt"
      set_bundle "$TMP/bundle.pem"
    else
      generate
      # Trust first, then serve: the bundle never lacks the CA of a certificate being served.
      pem_union "$TMP/old.pem" "$TMP/new/ca.crt" >"$TMP/bundle.pem"
      check_bundle "$TMP/bundle.pem" "$TMP/new/tls.crt"
      set_bundle "$TMP/bundle.pem"
      write_secret
    fi
    ;;
  rotate)
    current_bundle "$TMP/old.pem"
    if secret_exists; then
      secret_field ca.crt >>"$TMP/old.pem"
      secret_field tls.crt >"$TMP/served.crt"
    fi
    generate
    # 1. The API server trusts the old and the new CA ...
    pem_union "$TMP/old.pem" "$TMP/new/ca.crt" >"$TMP/bundle.pem"
    check_bundle "$TMP/bundle.pem" "$TMP/new/tls.crt"
    if [[ -s $TMP/served.crt ]]; then check_bundle "$TMP/bundle.pem" "$TMP/served.crt"; fi
    set_bundle "$TMP/bundle.pem"
    # 2. ... before any pod can present a certificate from the new one.
    write_secret
    say "next: once the pods serve the new certificate (~2 minutes), run $0 --prune-old-ca"
    ;;
  prune)
    secret_exists || die "secret/$SECRET not found in $NAMESPACE"
    secret_field ca.crt >"$TMP/ca.pem"
    [[ -s $TMP/ca.pem ]] || die "secret/$SECRET has no ca.crt"
    if [[ $FORCE != 1 ]]; then
      status=0
      pods_serve_secret_cert || status=$?
      case $status in
        0) ;;
        1) die "not pruning: a pod still presents a certificate from the old CA; wait and retry" ;;
        *)
          issued=$(k -n "$NAMESPACE" get secret "$SECRET" -o jsonpath="{.metadata.annotations.${ANNOTATION//./\\.}}")
          [[ -n $issued ]] || die "cannot tell when secret/$SECRET was written; check the pods yourself, then --force"
          age=$(($(date +%s) - issued))
          ((age >= MIN_AGE)) ||
            die "not pruning: secret/$SECRET is ${age}s old, pods may still serve the old certificate (wait until ${MIN_AGE}s, or --force)"
          say "pods not checked directly (no openssl or port-forward); secret/$SECRET is ${age}s old"
          ;;
      esac
    fi
    pem_union "$TMP/ca.pem" >"$TMP/bundle.pem"
    secret_field tls.crt >"$TMP/served.crt"
    check_bundle "$TMP/bundle.pem" "$TMP/served.crt"
    set_bundle "$TMP/bundle.pem"
    ;;
esac
say "done"
