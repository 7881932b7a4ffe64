"""Run the `reame` command as ``python -m reame.supervisor``."""

import sys

from reame.supervisor.cli import main

sys.exit(main())
