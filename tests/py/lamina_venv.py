"""The Python tests' packages come from PyPI into scripts/deps.sh's virtual environment:
require() re-runs the calling script with that environment's Python when a module is missing
here, and exits 77 (ctest: skipped, never passed) when it is missing there too."""
import importlib, os, sys

VENV = os.environ.get("LAMINA_VENV", os.path.expanduser("~/.cache/lamina/venv"))


def require(*modules):
    try:
        for m in modules:
            importlib.import_module(m)
    except ImportError as e:
        py = os.path.join(VENV, "bin", "python")
        if os.path.exists(py) and os.path.realpath(sys.prefix) != os.path.realpath(VENV):
            os.execv(py, [py] + sys.argv)
        print(f"{os.path.basename(sys.argv[0])}: {e.name} is not installed (scripts/deps.sh)", file=sys.stderr)
        sys.exit(77)
