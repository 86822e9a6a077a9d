#!/usr/bin/env bash
# Runs every `func Fuzz...` target in the module for a short time each.
# Usage: scripts/fuzz-all.sh DURATION   (e.g. 10s)
set -euo pipefail
duration=${1:-10s}
found=0
while IFS= read -r file; do
  pkg=./$(dirname "$file")
  for target in $(grep -oE '^func (Fuzz[A-Za-z0-9_]+)' "$file" | awk '{print $2}'); do
    found=1
    echo "fuzz $pkg $target for $duration"
    go test -run '^$' -fuzz "^${target}\$" -fuzztime "$duration" "$pkg"
  done
done < <(git ls-files '*_test.go'; git ls-files --others --exclude-standard '*_test.go')
[ "$found" = 1 ] || echo "fuzz: no targets yet"
