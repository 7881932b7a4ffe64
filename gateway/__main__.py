"""``python -m gateway [--config FILE]``."""

import sys

from gateway.main import main

sys.exit(main())
