"""Run the `reame` command as ``python -m supervisor``."""

import sys

from supervisor.cli import main

sys.exit(main())
