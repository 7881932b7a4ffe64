"""Run the cachekeeper: ``python -m cachekeeper [--config FILE]``."""

import sys

from cachekeeper.main import main

sys.exit(main())
