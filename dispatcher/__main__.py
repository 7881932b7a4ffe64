"""Run the dispatcher: ``python -m dispatcher [--config FILE]``."""

import sys

from dispatcher.main import main

sys.exit(main())
