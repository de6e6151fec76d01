"""A CPU-only install (`pip install -e '.[dev]'`, no CuPy) imports every module and runs the CPU suite.

CuPy is imported where the GPU is used, inside the function that uses it, never at a module's top:
a test that needs no GPU may import any module. CI installs CuPy, so this test hides it to prove
the rule there too.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

IMPORT_EVERYTHING_WITHOUT_CUPY = """
import importlib, pkgutil, sys
sys.modules["cupy"] = None        # `import cupy` now raises ImportError, as where it is not installed
sys.modules["cupyx"] = None
import labrunner
failed = []
for module in pkgutil.walk_packages(labrunner.__path__, "labrunner."):
    if module.name.endswith(".__main__"):
        continue  # importing it runs the command line
    try:
        importlib.import_module(module.name)
    except ImportError as exc:
        failed.append(f"{module.name}: {exc}")
print("\\n".join(failed) or "all imported")
"""


def test_every_module_imports_without_cupy():
    completed = subprocess.run(
        [sys.executable, "-c", IMPORT_EVERYTHING_WITHOUT_CUPY], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert completed.stdout == "all imported\n"


def test_the_gpu_timer_imports_cupy_only_when_a_timer_is_made():
    script = (
        "import sys; sys.modules['cupy'] = None\n"
        "from labrunner.measure.gpu_timer import CupyTimer\n"
        "try:\n    CupyTimer()\nexcept ImportError as exc:\n    print('ImportError:', exc)\n"
    )
    completed = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert completed.stdout == "ImportError: import of cupy halted; None in sys.modules\n", completed.stderr[-2000:]
