#!/usr/bin/env bash
# Point the README's Binder badge at wherever this repository is hosted.
#
#   bash scripts/binder_badge.sh            # OWNER/REPO from `git remote get-url origin`
#   bash scripts/binder_badge.sh OWNER/REPO # or given explicitly
#
# Rewrites the one README line that starts with "[![Binder]" (and the launch link in
# binder/README.md) to https://mybinder.org/v2/gh/OWNER/REPO/HEAD?urlpath=... . Binder builds
# GitHub repositories, so the origin must be a GitHub URL (https://github.com/OWNER/REPO(.git),
# git@github.com:OWNER/REPO(.git) or ssh://git@github.com/OWNER/REPO). Idempotent.
set -euo pipefail

root=$(git rev-parse --show-toplevel)
slug=${1:-}
if [[ -z "$slug" ]]; then
  if ! url=$(git -C "$root" remote get-url origin 2>/dev/null); then
    echo "binder_badge: no 'origin' remote; pass OWNER/REPO explicitly" >&2
    exit 2
  fi
  if [[ "$url" =~ ^(https://|ssh://git@|git@)github\.com[:/]([^/]+)/([^/]+)$ ]]; then
    slug="${BASH_REMATCH[2]}/${BASH_REMATCH[3]%.git}"
  else
    echo "binder_badge: origin '$url' is not a GitHub repository (Binder needs one); pass OWNER/REPO" >&2
    exit 2
  fi
fi
if [[ ! "$slug" =~ ^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9_.-]+$ ]]; then
  echo "binder_badge: '$slug' is not OWNER/REPO" >&2
  exit 2
fi

launch="https://mybinder.org/v2/gh/$slug/HEAD?urlpath=lab/tree/notebooks/01-quickstart.ipynb"
badge="[![Binder](https://mybinder.org/badge_logo.svg)]($launch)"
readme="$root/README.md"
if ! grep -q '^\[!\[Binder\]' "$readme"; then
  echo "binder_badge: no line starting with '[![Binder]' in $readme" >&2
  exit 1
fi
BADGE="$badge" awk '/^\[!\[Binder\]/ { print ENVIRON["BADGE"]; next } { print }' "$readme" >"$readme.tmp"
mv "$readme.tmp" "$readme"
binder_doc="$root/binder/README.md"
if [[ -f "$binder_doc" ]]; then
  LAUNCH="$launch" awk '/^    https:\/\/mybinder\.org\/v2\/gh\// { print "    " ENVIRON["LAUNCH"]; next } { print }' \
    "$binder_doc" >"$binder_doc.tmp"
  mv "$binder_doc.tmp" "$binder_doc"
fi
echo "Binder badge now points at $slug"
