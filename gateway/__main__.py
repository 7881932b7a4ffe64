"""``python -m reame.gateway [--config FILE]``."""

import sys

from reame.gateway.main import main

sys.exit(main())
