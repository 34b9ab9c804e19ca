#!/usr/bin/env bash
# A GPU machine sent this working tree may take at most 64 MiB, and the raw results' archives are more than that:
# move them out of the tree before the tree is sent, and back after.
#   bash benchmarks/device_tree.sh aside [KEEP_REGEX]  # archives not matching KEEP_REGEX into .git/results-aside
#   bash benchmarks/device_tree.sh back                # every archive put aside back in benchmarks/results/
# Put them back before any commit: while aside, git sees them as deleted.
set -euo pipefail
cd "$(dirname "$0")/.."
aside="$(git rev-parse --git-dir)/results-aside"
case "${1:?aside or back}" in
  aside)
    mkdir -p "$aside"
    for f in benchmarks/results/*.tar.gz; do
      [[ -n "${2:-}" && "$f" =~ $2 ]] || mv "$f" "$aside/"
    done
    echo "put aside: $(ls "$aside" | wc -l) archives; the tree now holds $(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1) bytes" ;;
  back)
    [ -d "$aside" ] && find "$aside" -name '*.tar.gz' -exec mv -t benchmarks/results/ {} +
    git status --short benchmarks/results | grep '^ D' && { echo "still missing"; exit 1; } || echo "all back" ;;
  *) echo "usage: $0 aside [KEEP_REGEX] | back" >&2; exit 2 ;;
esac
