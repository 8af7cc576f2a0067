#!/usr/bin/env bash
# Fails (listing the files) when a C++/CUDA file of src/, tests/, fuzz/ or bench/ deviates from the repo's
# .clang-format. Fix with: clang-format -i <files>. Generated files carry `// clang-format off`.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "check-format: clang-format is not installed" >&2; exit 1; }
mapfile -t files < <(git ls-files 'src/*.cc' 'src/*.h' 'src/*.cu' 'src/*.cuh' 'tests/*.cc' 'tests/*.h' 'tests/*.cu' 'fuzz/*.cc' 'fuzz/*.h' \
                                  'tests/*.cuh' 'bench/*.cc' 'bench/*.h' 'bench/*.cu' 'bench/*.cuh')
bad=()
for f in "${files[@]}"; do
  clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "check-format: ${#bad[@]} file(s) differ from .clang-format ($(clang-format --version)):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  echo "run: clang-format -i ${bad[*]}" >&2
  exit 1
fi
echo "check-format: ${#files[@]} files formatted"
