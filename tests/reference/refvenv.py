"""The reference tests that compare with Hugging Face's and ggml's Python
packages run under the repository's .venv/ (made by scripts/deps.sh). Called
before those packages are imported: re-executes the test with .venv/bin/python
when it is not running there, or exits 77 (ctest's skip) saying why when the
venv is missing. Standard library only."""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENV_PY = os.path.join(ROOT, ".venv", "bin", "python")


def enter(needs):
    """needs: the packages the test uses, named in the skip message."""
    if os.path.realpath(sys.prefix) == os.path.realpath(os.path.join(ROOT, ".venv")):
        return
    if not os.path.exists(VENV_PY):
        print("SKIP: %s is missing: run scripts/deps.sh to install the Python reference "
              "clients (%s)" % (VENV_PY, needs))
        sys.exit(77)
    os.execv(VENV_PY, [VENV_PY] + sys.argv)
