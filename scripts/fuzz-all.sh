#!/usr/bin/env bash
# Runs every `func Fuzz...` target in the module for a short time each.
# Usage: scripts/fuzz-all.sh BUDGET   (go test -fuzztime: a count such as
# 50000x, or a duration such as 10s; the Makefile uses a count, see there)
set -euo pipefail
budget=${1:-50000x}
found=0
while IFS= read -r file; do
  pkg=./$(dirname "$file")
  for target in $(grep -oE '^func (Fuzz[A-Za-z0-9_]+)' "$file" | awk '{print $2}'); do
    found=1
    echo "fuzz $pkg $target for $budget"
    go test -run '^$' -fuzz "^${target}\$" -fuzztime "$budget" "$pkg"
  done
done < <(git ls-files '*_test.go'; git ls-files --others --exclude-standard '*_test.go')
[ "$found" = 1 ] || echo "fuzz: no targets yet"
