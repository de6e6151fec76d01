#!/usr/bin/env bash
# Mutation testing: plant small bugs in the modules that decide verdicts and numbers, one at a
# time, and count how many the tests catch. The modules and the tests that try them are in
# pyproject.toml's [tool.mutmut]; mutmut runs, for each mutant, only the selected tests that call
# the mutated function, so every module is tried by its own fast tests.
#
#   pip install -e '.[dev,mutation]'
#   bash scripts/mutation.sh            # about 15 minutes on two cores; results are kept in mutants/
#   bash scripts/mutation.sh --fresh    # forget earlier results and try every mutant again
#
# It prints every surviving mutant (`mutmut show NAME` shows its diff), then the score. The C++
# rules of the CPU backend are out of mutmut's reach: tests/test_cpu_semantics.py plants wrong
# rules there by hand and runs with the ordinary suite.
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-.venv/bin/python}
[ -x "$python" ] || python=python3
if ! "$python" -c "import mutmut" 2>/dev/null; then
    echo "mutmut is not installed: $python -m pip install -e '.[dev,mutation]'" >&2
    exit 6
fi
mutmut=("$python" -m mutmut)
"$python" -c "import mutmut.__main__" 2>/dev/null || { echo "this mutmut cannot run as a module" >&2; exit 6; }

if [ "${1:-}" = "--fresh" ]; then
    rm -rf mutants
fi

children=$(nproc 2>/dev/null || echo 2)
# mutmut's progress line redraws itself many times a second; keep only its last state
"${mutmut[@]}" run --max-children "$children" 2>&1 | tr '\r' '\n' | grep -v '^[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏]' | tail -n 5 || true

echo
echo "surviving mutants (mutmut show NAME for the diff):"
"${mutmut[@]}" results 2>/dev/null | sed -n 's/^ *\(.*\): survived$/  \1/p'

"$python" - <<'EOF'
import json
from collections import Counter
from pathlib import Path

# mutmut's exit codes per mutant, as its own `stats` module reads them
KILLED = {1, 3}
by_file, totals = {}, Counter()
for meta in sorted(Path("mutants").rglob("*.py.meta")):
    codes = json.loads(meta.read_text())["exit_code_by_key"].values()
    name = str(meta.relative_to("mutants"))[: -len(".meta")]
    counts = Counter("killed" if c in KILLED else "survived" if c == 0 else "no tests" if c in (5, 33)
                     else "timeout" if c in (24, 36, -24, 152, 255) else "not checked" if c is None else "other"
                     for c in codes)
    by_file[name] = counts
    totals.update(counts)

print()
print(f"{'module':40} {'killed':>7} {'survived':>9} {'no tests':>9} {'other':>6} {'total':>6}")
for name, c in by_file.items():
    total = sum(c.values())
    print(f"{name:40} {c['killed']:7} {c['survived']:9} {c['no tests']:9} "
          f"{c['timeout'] + c['not checked'] + c['other']:6} {total:6}")
total = sum(totals.values())
print(f"\nscore: {totals['killed']} killed / {total} total ({totals['killed'] / max(total, 1):.1%}); "
      f"{totals['survived']} survived, {totals['no tests']} with no test calling them, "
      f"{totals['timeout']} timed out, {totals['not checked']} not checked")
EOF
