#!/usr/bin/env bash
# One Kubernetes Deployment per worker build (Worker Versioning; deploy/README.md "Upgrading
# under running work"). Runs are pinned to the build they started on, so a new build must not
# replace the old pods the way a rolling update does: it runs beside them until nothing is
# pinned to the old build any more.
#
#   deploy/k8s/fleet.sh render  OVERLAY BUILD_ID [IMAGE]  # print the build's manifests
#   deploy/k8s/fleet.sh apply   OVERLAY BUILD_ID [IMAGE]  # apply them, wait until ready
#   deploy/k8s/fleet.sh promote BUILD_ID                  # make it the current version
#   deploy/k8s/fleet.sh retire  BUILD_ID                  # delete it once nothing is pinned
#
# BUILD_ID is the workers' `deployment.build_id` (set here as BATON_DEPLOYMENT__BUILD_ID; by
# default an image's binaries use the build id baked in at build time, `--build-arg
# BATON_BUILD_ID=...` in deploy/Dockerfile). IMAGE replaces the overlay's image for this build.
# Needs kubectl (kustomize built in), and for promote/retire the `temporal` and `baton` CLIs
# reaching the cluster's Temporal (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, ...).
# NAMESPACE (default baton) is the Kubernetes namespace, DEPLOYMENT (default baton) the
# Worker Deployment name.

set -euo pipefail

NAMESPACE=${NAMESPACE:-baton}
DEPLOYMENT=${DEPLOYMENT:-baton}

usage() {
  sed -n '7,11p' "$0" >&2
  exit 2
}

# A build id is a label value here: at most 63 of [A-Za-z0-9._-], alphanumeric at both ends.
check_build_id() {
  if ! [[ $1 =~ ^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$ ]]; then
    echo "fleet.sh: build id '$1' is not a valid Kubernetes label value (at most 63 of A-Z a-z 0-9 . _ -, alphanumeric at both ends)" >&2
    exit 2
  fi
}

# The Deployment and HPA of one build: the overlay's, renamed baton-worker-<build id>, with a
# build-id label in their selector, and the build id in the worker's environment.
render() {
  local overlay=$1 build=$2 image=${3:-}
  [[ -d $overlay ]] || { echo "fleet.sh: no overlay directory '$overlay'" >&2; exit 2; }
  check_build_id "$build"
  local dir
  dir=$(mktemp -d)
  trap 'rm -rf "$dir"' RETURN
  local name="baton-worker-$build"
  local rel
  rel=$(realpath --relative-to="$dir" "$overlay")
  {
    echo "apiVersion: kustomize.config.k8s.io/v1beta1"
    echo "kind: Kustomization"
    echo "resources:"
    echo "  - $rel"
    cat <<EOF
patches:
  - target: {kind: Deployment, name: baton-worker}
    patch: |-
      - {op: replace, path: /metadata/name, value: $name}
      - {op: add, path: /metadata/labels/baton.dev~1build-id, value: "$build"}
      - {op: add, path: /spec/selector/matchLabels/baton.dev~1build-id, value: "$build"}
      - {op: add, path: /spec/template/metadata/labels/baton.dev~1build-id, value: "$build"}
      - {op: add, path: /spec/template/spec/containers/0/env/-, value: {name: BATON_DEPLOYMENT__BUILD_ID, value: "$build"}}
      - {op: add, path: /spec/template/spec/containers/0/env/-, value: {name: BATON_DEPLOYMENT__NAME, value: "$DEPLOYMENT"}}
EOF
    if [[ -n $image ]]; then
      echo "      - {op: replace, path: /spec/template/spec/containers/0/image, value: \"$image\"}"
    fi
    cat <<EOF
  - target: {kind: HorizontalPodAutoscaler, name: baton-worker}
    patch: |-
      - {op: replace, path: /metadata/name, value: $name}
      - {op: replace, path: /spec/scaleTargetRef/name, value: $name}
EOF
  } >"$dir/kustomization.yaml"
  # Other objects (ConfigMap, Service, PDB, ServiceAccount, a dev server) are shared by every
  # build and applied unchanged.
  kubectl kustomize "$dir"
}

cmd=${1:-}
case $cmd in
  render)
    [[ $# -ge 3 ]] || usage
    render "$2" "$3" "${4:-}"
    ;;
  apply)
    [[ $# -ge 3 ]] || usage
    render "$2" "$3" "${4:-}" | kubectl apply -f -
    kubectl -n "$NAMESPACE" rollout status "deploy/baton-worker-$3"
    echo "build $3 is up and serves the runs pinned to it; before it takes new runs:"
    echo "  baton replay-check   # with the baton CLI of build $3: exits 1 naming runs it cannot replay"
    echo "  deploy/k8s/fleet.sh promote $3"
    ;;
  promote)
    [[ $# -ge 2 ]] || usage
    check_build_id "$2"
    temporal worker deployment set-current-version --deployment-name "$DEPLOYMENT" \
      --build-id "$2" --yes
    baton fleet status --deployment "$DEPLOYMENT"
    ;;
  retire)
    [[ $# -ge 2 ]] || usage
    check_build_id "$2"
    status=$(baton fleet status --deployment "$DEPLOYMENT" --json)
    line=$(printf '%s' "$status" | python3 -c '
import json, sys
fleet = json.load(sys.stdin)
build = [b for b in fleet["builds"] if b["build_id"] == sys.argv[1]]
print("%s %d" % (build[0]["state"] or "-", build[0]["open_runs"]) if build else "absent 0")
' "$2")
    read -r state open <<<"$line"
    if [[ $state == current || $state == ramping ]]; then
      echo "fleet.sh: build $2 is the $state version; promote another build first" >&2
      exit 1
    fi
    if [[ $open != 0 ]]; then
      echo "fleet.sh: $open open run(s) are pinned to build $2; retire it once they end (baton fleet status)" >&2
      exit 1
    fi
    kubectl -n "$NAMESPACE" delete deployment,hpa -l "baton.dev/build-id=$2" --ignore-not-found
    ;;
  *)
    usage
    ;;
esac
