#!/usr/bin/env bash
# Keeps the documents that sources cite in the repository: every `docs/<name>.md` mentioned in a .h, .cpp or .md
# file (build*/ directories and .git excluded) must exist, and a reference followed by a quoted section name
# (`docs/trainer_contract.md "Logging"`) must name a heading of that file. References to SEMANTICS.md, a planning
# document that is not part of the repository, are an error. Usage: check_doc_refs.sh [repository root]
set -euo pipefail
root="${1:-$(cd "$(dirname "$0")/../.." && pwd)}"
cd "$root"
fail=0

sources() {
  find . \( -path ./.git -o -path './build*' \) -prune -o -type f \( -name '*.h' -o -name '*.cpp' -o -name '*.md' \) \
    -print0 | LC_ALL=C sort -z
}

# Stale references to the planning document.
stale="$(sources | xargs -0 -r grep -n 'SEMANTICS\.md' -- 2>/dev/null || true)"
if [[ -n "$stale" ]]; then
  echo "check_doc_refs: SEMANTICS.md is not in the repository; cite docs/trainer_contract.md instead:" >&2
  echo "$stale" >&2
  fail=1
fi

# docs/<name>.md references (not part of a URL or of a longer path), optionally with a quoted section name.
refs=0
while IFS= read -r hit; do
  file="${hit%%:*}"
  rest="${hit#*:}"
  line="${rest%%:*}"
  ref="${rest#*:}"
  doc="$(grep -oE 'docs/[A-Za-z0-9_./-]+\.md' <<<"$ref" | head -n1)"
  refs=$((refs + 1))
  if [[ ! -f "$doc" ]]; then
    echo "check_doc_refs: $file:$line cites $doc, which does not exist" >&2
    fail=1
    continue
  fi
  section="$(sed -nE 's/^docs\/[A-Za-z0-9_./-]+\.md(,? section)? "([^"]+)".*/\2/p' <<<"$ref")"
  if [[ -n "$section" ]] && ! grep -qxF -- "$section" < <(sed -nE 's/^#+[[:space:]]+(.*[^[:space:]])[[:space:]]*$/\1/p' "$doc"); then
    echo "check_doc_refs: $file:$line cites section \"$section\" of $doc, which has no such heading" >&2
    fail=1
  fi
done < <(sources | xargs -0 -r grep -noE '(^|[^A-Za-z0-9_./:-])docs/[A-Za-z0-9_./-]+\.md(,? section)?( "[^"]+")?' -- 2>/dev/null \
           | sed -E 's/^([^:]*:[0-9]+:)[^d]*/\1/' || true)

if [[ "$fail" -ne 0 ]]; then
  exit 1
fi
echo "check_doc_refs: $refs reference(s) to docs/*.md, all present; no SEMANTICS.md references"
