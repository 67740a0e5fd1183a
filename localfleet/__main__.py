"""`python -m localfleet ...` (in the project's .venv): the commands of `python3 hack/localfleet.py ...`."""

import sys

from localfleet.cli import main

sys.exit(main())
