"""``python -m reame.worker``: see worker.main."""

import sys

from reame.worker.main import main

sys.exit(main())
