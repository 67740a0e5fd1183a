#!/usr/bin/env python3
"""The local fleet's command line: `python3 hack/localfleet.py --help`. The code is the package
localfleet/ at the repository root (docs/local-fleet.md); this file only runs it.

It runs with a plain `python3`: when PyYAML or cryptography are missing it creates the project's
.venv, installs the project there and re-executes itself with that interpreter.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _bootstrap() -> None:
    """Re-exec inside the project's .venv when the third-party modules we need are missing."""
    try:
        import cryptography  # noqa: F401
        import yaml  # noqa: F401
    except ImportError:
        pass
    else:
        return
    venv_python = REPO / ".venv" / "bin" / "python"
    if Path(sys.executable).resolve() == venv_python.resolve() or os.environ.get("LOCALFLEET_BOOTSTRAPPED"):
        sys.exit("localfleet: PyYAML and cryptography are missing even in .venv; run `make venv` and retry")
    import subprocess

    if not venv_python.exists():
        print("localfleet: creating .venv for the harness (PyYAML, cryptography)", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(REPO / ".venv")], check=True)
    subprocess.run(
        [str(venv_python), "-m", "pip", "install", "-q", "-e", f"{REPO}[test]"],
        check=True,
    )
    os.environ["LOCALFLEET_BOOTSTRAPPED"] = "1"
    os.execv(str(venv_python), [str(venv_python), *sys.argv])


if __name__ == "__main__":
    _bootstrap()
    sys.path.insert(0, str(REPO))
    from localfleet.cli import main

    sys.exit(main())
else:
    # Imported as `localfleet` because hack/ comes before the repository root on sys.path (the scripts of
    # hack/ and their tests put it first): stand in for the package.
    import importlib.util

    _spec = importlib.util.spec_from_file_location(
        __name__, REPO / "localfleet" / "__init__.py", submodule_search_locations=[str(REPO / "localfleet")]
    )
    assert _spec is not None and _spec.loader is not None
    sys.modules[__name__] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sys.modules[__name__])
