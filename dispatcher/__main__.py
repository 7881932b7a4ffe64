"""Run the dispatcher: ``python -m reame.dispatcher [--config FILE]``."""

import sys

from reame.dispatcher.main import main

sys.exit(main())
