#!/usr/bin/env bash
# Run against a worker cluster: creates the identity the MultiKueue manager uses there (a
# ServiceAccount bound to deploy/rbac/multikueue-worker-clusterrole.yaml) and writes a
# self-contained kubeconfig for it (inline CA data and token: what the manager accepts).
# Idempotent: run it again to refresh the token. Never prints the token.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: hack/create-multikueue-kubeconfig.sh [--kubeconfig WORKER_KUBECONFIG] [--namespace kueue-system]
                                            [--service-account multikueue-sa] [--duration 8760h] OUTPUT_FILE

Against the worker cluster of WORKER_KUBECONFIG's current context (default: kubectl's default
kubeconfig), creates the namespace if missing, the ServiceAccount, the ClusterRole from
deploy/rbac/multikueue-worker-clusterrole.yaml and its ClusterRoleBinding, requests a token
(TokenRequest, valid for --duration) and writes a kubeconfig with that token to OUTPUT_FILE (mode 0600).
kubectl is taken from $KUBECTL, or from PATH.
EOF
}

die() {
  echo "error: $*" >&2
  exit 1
}

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
role_file="$repo_root/deploy/rbac/multikueue-worker-clusterrole.yaml"
# The Secret goes into the manager's config namespace, whatever namespace is used on the worker.
manager_namespace=kueue-system

worker_kubeconfig=""
namespace=kueue-system
service_account=multikueue-sa
duration=8760h
output=""

need_value() {
  [[ $# -ge 2 && -n $2 ]] || die "$1 needs a value (see --help)"
}

while [[ $# -gt 0 ]]; do
  case $1 in
    -h | --help)
      usage
      exit 0
      ;;
    --kubeconfig | --namespace | --service-account | --duration)
      need_value "$@"
      case $1 in
        --kubeconfig) worker_kubeconfig=$2 ;;
        --namespace) namespace=$2 ;;
        --service-account) service_account=$2 ;;
        --duration) duration=$2 ;;
      esac
      shift 2
      ;;
    --kubeconfig=* | --namespace=* | --service-account=* | --duration=*)
      value=${1#*=}
      [[ -n $value ]] || die "${1%%=*} needs a value (see --help)"
      case $1 in
        --kubeconfig=*) worker_kubeconfig=$value ;;
        --namespace=*) namespace=$value ;;
        --service-account=*) service_account=$value ;;
        --duration=*) duration=$value ;;
      esac
      shift
      ;;
    -*)
      usage >&2
      die "unknown option $1"
      ;;
    *)
      [[ -z $output ]] || die "only one OUTPUT_FILE may be given (got $output and $1)"
      output=$1
      shift
      ;;
  esac
done
if [[ -z $output ]]; then
  usage >&2
  die "OUTPUT_FILE is missing"
fi

kubectl_bin=${KUBECTL:-kubectl}
command -v "$kubectl_bin" >/dev/null 2>&1 ||
  die "kubectl not found ($kubectl_bin): install it, put it on PATH or set KUBECTL=/path/to/kubectl"
[[ -f $role_file ]] || die "$role_file is missing: run this script from a checkout of the repository"
output_dir=$(dirname -- "$output")
[[ -d $output_dir && -w $output_dir ]] || die "cannot write $output: $output_dir is not a writable directory"

kubectl_args=()
if [[ -n $worker_kubeconfig ]]; then
  [[ -f $worker_kubeconfig ]] || die "--kubeconfig $worker_kubeconfig: no such file"
  kubectl_args=(--kubeconfig "$worker_kubeconfig")
fi
kc() {
  "$kubectl_bin" ${kubectl_args[@]+"${kubectl_args[@]}"} "$@"
}

# --- the worker's endpoint, from the current context ----------------------------------------
context=$(kc config current-context 2>&1) ||
  die "cannot use the worker kubeconfig${worker_kubeconfig:+ $worker_kubeconfig}: ${context##*$'\n'}"
# One field of the current context's cluster; `--raw` so that CA data is not redacted.
cluster_field() {
  kc config view --minify --raw -o "jsonpath={.clusters[0].cluster.$1}"
}
cluster_name=$(kc config view --minify -o 'jsonpath={.clusters[0].name}')
cluster_name=${cluster_name:-worker}
server=$(cluster_field server)
[[ -n $server ]] || die "context $context: its cluster $cluster_name has no server"
ca_data=$(cluster_field certificate-authority-data)
if [[ -z $ca_data ]]; then
  ca_file=$(cluster_field certificate-authority)
  if [[ -n $ca_file ]]; then
    # A file path would not exist on the manager: inline the file. --flatten reads it, resolving
    # a relative path against the kubeconfig that names it.
    ca_data=$(kc config view --minify --flatten -o 'jsonpath={.clusters[0].cluster.certificate-authority-data}' 2>/dev/null) ||
      die "context $context: cannot read its certificate-authority file $ca_file"
    [[ -n $ca_data ]] || die "context $context: cannot read its certificate-authority file $ca_file"
  elif [[ $(cluster_field insecure-skip-tls-verify) == true ]]; then
    die "context $context skips TLS verification (insecure-skip-tls-verify): the manager refuses such kubeconfigs; give the worker's CA instead"
  else
    die "context $context: its cluster $cluster_name has no certificate-authority-data or certificate-authority"
  fi
fi

if ! probe=$(kc --request-timeout=15s get --raw=/version 2>&1); then
  die "cannot reach the worker cluster at $server (context $context): ${probe##*$'\n'}"
fi
echo "worker: context $context, server $server"

# --- identity and permissions ----------------------------------------------------------------
if kc get namespace "$namespace" >/dev/null 2>&1; then
  echo "namespace $namespace: exists"
else
  kc create namespace "$namespace" >/dev/null || die "cannot create namespace $namespace"
  echo "namespace $namespace: created"
fi

if kc -n "$namespace" get serviceaccount "$service_account" >/dev/null 2>&1; then
  echo "serviceaccount $namespace/$service_account: exists"
else
  kc -n "$namespace" create serviceaccount "$service_account" >/dev/null ||
    die "cannot create serviceaccount $namespace/$service_account"
  echo "serviceaccount $namespace/$service_account: created"
fi

# Server-side apply: the file is the source of truth, whoever created the role before.
apply=(apply --server-side --force-conflicts --field-manager=create-multikueue-kubeconfig)
role_name=$(kc "${apply[@]}" -f "$role_file" -o 'jsonpath={.metadata.name}') ||
  die "cannot apply $role_file"
echo "clusterrole $role_name: applied from deploy/rbac/$(basename "$role_file")"

# Named after the subject: hack/localfleet.py already binds the same role to another identity.
binding="$role_name:$namespace:$service_account"
kc create clusterrolebinding "$binding" --clusterrole="$role_name" \
  --serviceaccount="$namespace:$service_account" --dry-run=client -o yaml |
  kc "${apply[@]}" -f - >/dev/null ||
  die "cannot bind clusterrole $role_name to $namespace/$service_account"
echo "clusterrolebinding $binding: applied"

# --- token and kubeconfig ----------------------------------------------------------------------
token=$(kc -n "$namespace" create token "$service_account" --duration="$duration") ||
  die "TokenRequest for $namespace/$service_account (--duration $duration) failed"
[[ -n $token ]] || die "TokenRequest for $namespace/$service_account returned no token"

# The apiserver may grant less than asked (--service-account-max-token-expiration): say when it ends.
expiry=""
jwt_payload=${token#*.}
jwt_payload=${jwt_payload%%.*}
jwt_payload=$(printf '%s' "$jwt_payload" | tr '_-' '/+')
while ((${#jwt_payload} % 4)); do jwt_payload+="="; done
if exp=$(printf '%s' "$jwt_payload" | base64 -d 2>/dev/null | grep -o '"exp":[0-9]*' | cut -d: -f2) && [[ -n $exp ]]; then
  expiry=$(date -u -d "@$exp" +%Y-%m-%dT%H:%M:%SZ 2>/dev/null || echo "unix time $exp")
fi
echo "token: requested for $namespace/$service_account (--duration $duration)${expiry:+, expires $expiry}"

# YAML double-quoted scalar.
yaml_quote() {
  local s=${1//\\/\\\\}
  printf '"%s"' "${s//\"/\\\"}"
}
user_name="$namespace/$service_account"

# Written next to OUTPUT_FILE with mode 0600 from the start, then renamed over it.
tmp=$(mktemp "$output_dir/.multikueue-kubeconfig.XXXXXX")
trap 'rm -f -- "$tmp"' EXIT
chmod 600 "$tmp"
{
  echo "apiVersion: v1"
  echo "kind: Config"
  echo "clusters:"
  echo "  - name: $(yaml_quote "$cluster_name")"
  echo "    cluster:"
  echo "      server: $(yaml_quote "$server")"
  echo "      certificate-authority-data: $(yaml_quote "$ca_data")"
  echo "users:"
  echo "  - name: $(yaml_quote "$user_name")"
  echo "    user:"
  echo "      token: $(yaml_quote "$token")"
  echo "contexts:"
  echo "  - name: $(yaml_quote "$cluster_name")"
  echo "    context:"
  echo "      cluster: $(yaml_quote "$cluster_name")"
  echo "      user: $(yaml_quote "$user_name")"
  echo "current-context: $(yaml_quote "$cluster_name")"
} >"$tmp"
mv -f -- "$tmp" "$output"
trap - EXIT
echo "wrote $output (mode 0600): server $server, user $user_name"

# A Secret name from the file name: worker1.kubeconfig -> worker1-secret.
secret=$(basename -- "$output")
secret=${secret%.*}
secret=$(printf '%s' "$secret" | tr '[:upper:]' '[:lower:]' | tr -c 'a-z0-9-' '-' | sed 's/^-*//; s/-*$//')
secret="${secret:-worker}-secret"
echo "next, on the manager cluster:"
printf '  kubectl create secret generic %s -n %s --from-file=kubeconfig=%q\n' "$secret" "$manager_namespace" "$output"
echo "and point a MultiKueueCluster at it: spec.kubeConfig {locationType: Secret, location: $secret}"
