"""amptrain_python - which Python runs the launch scripts and tools (launch/*, tools/*).

Their #! line runs python3, the first on PATH. AMPTRAIN_PYTHON names another one, e.g. the system's
/usr/bin/python3 that has Debian's python3-matplotlib and python3-pil where a pyenv or conda python3 comes
first on PATH: reexec() runs the script again under it. When a module is missing, missing() says which
Python lacked it. In a source tree this module sits in launch/; in an installed prefix in
share/amptrain/python/ (each script looks in both places).
"""

import os
import shutil
import sys

# Set (to AMPTRAIN_PYTHON's value) in the environment of the interpreter reexec() started, so that it, and
# a script it runs in turn with sys.executable, does not start another.
RUNNING = "AMPTRAIN_PYTHON_RUNNING"


def reexec(prog):
    """Runs this script again under $AMPTRAIN_PYTHON when that is set and not the interpreter running it;
    exit code 2 when it names no executable."""
    want = os.environ.get("AMPTRAIN_PYTHON")
    if not want or os.environ.get(RUNNING) == want:
        return
    path = shutil.which(want)
    if path is None:
        print(f"{prog}: AMPTRAIN_PYTHON={want} is not an executable: set it to a Python 3, or unset it to use "
              f"python3 on PATH", file=sys.stderr)
        sys.exit(2)
    os.environ[RUNNING] = want
    if os.path.realpath(path) == os.path.realpath(sys.executable):
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(path, [path, sys.argv[0], *sys.argv[1:]])


def missing(module, debian):
    """The words for a module this Python lacks, naming the Python and how to choose another."""
    return (f"{module} is not installed for {sys.executable} (AMPTRAIN_PYTHON=/path/to/python3 runs the scripts "
            f"under another; Debian: apt-get install {debian})")
