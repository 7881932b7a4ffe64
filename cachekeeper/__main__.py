"""Run the cachekeeper: ``python -m reame.cachekeeper [--config FILE]``."""

import sys

from reame.cachekeeper.main import main

sys.exit(main())
