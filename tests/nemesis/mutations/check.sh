#!/usr/bin/env bash
# Mutation check of the nemesis's checker: run the harness against a copy of the code
# with one deliberate bug, and require the checker to report it in the right category.
#
#   tests/nemesis/mutations/check.sh MUTATION [python -m tests.nemesis options...]
#   tests/nemesis/mutations/check.sh all
#
# MUTATION is a patch of this directory (without .patch); its expected category is in
# the table below. The copy goes to a scratch directory (the compiled extensions come
# along; this checkout's .venv runs it, the copy's .devpath first on PYTHONPATH), is patched, and
# is deleted afterwards. Exit 0 when the category was reported, 1 when it was not.
set -euo pipefail

here=$(cd "$(dirname "$0")/../../.." && pwd)
declare -A expect=(
  [drop-replicated-record]=lost
  [duplicate-replicated-record]=duplicated
  [sow-skips-replicated-update]=sow-fold
)
name=${1:?usage: check.sh MUTATION|all [nemesis options]}
shift
if [[ $name == all ]]; then
  status=0
  for m in "${!expect[@]}"; do "$0" "$m" "$@" || status=1; done
  exit $status
fi
patch_file=$here/tests/nemesis/mutations/$name.patch
category=${expect[$name]:?unknown mutation $name (one of: ${!expect[*]})}

scratch=$(mktemp -d /tmp/spool-mutant-XXXXXX)
trap 'rm -rf "$scratch"' EXIT
tar -C "$here" --exclude=./.venv --exclude=./node_modules --exclude=./test-artifacts \
  --exclude=./.git --exclude=.mypy_cache --exclude=.ruff_cache -cf - . | tar -C "$scratch" -xf -
ln -s "$here/node_modules" "$scratch/node_modules"
(cd "$scratch" && patch -s -p1 < "$patch_file")
out=$scratch/test-artifacts/nemesis
set +e
(cd "$scratch" && PYTHONPATH=$scratch/.devpath:$scratch "$here/.venv/bin/python" -m tests.nemesis \
  --minutes 1 --seed 35 --faults pause,delay --out "$out" "$@")
set -e
mkdir -p "$here/test-artifacts/nemesis/mutations"
cp "$out/summary.json" "$here/test-artifacts/nemesis/mutations/$name.json"
count=$("$here/.venv/bin/python" -c "
import json, sys
print(json.load(open(sys.argv[1]))['anomaly_counts'].get(sys.argv[2], 0))
" "$out/summary.json" "$category")
if [[ $count -gt 0 ]]; then
  echo "mutation $name: caught as $category ($count)"
else
  echo "mutation $name: NOT caught as $category" >&2
  exit 1
fi
