"""``python -m reame.worker``: see worker.main."""

import os
import sys

# llama.cpp's CPU threads meet at a barrier after every operation, and libgomp's default
# is to spin there. When a borrowed core is not idle after all (a shared vCPU, another
# process, a busy loop at low priority), the thread that got there first spins through
# its time slice while the other waits for the CPU: a 1,150-token question took 58 s
# instead of 9 s beside a nice-10 busy loop. Passive waiting sleeps at once, and costs
# nothing measurable on an idle machine (9.15 s against 9.31 s). libgomp reads this when
# llama.cpp is loaded, so it is set before anything imports it; a user's own value wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from reame.worker.main import main  # after the environment it must see

sys.exit(main())
