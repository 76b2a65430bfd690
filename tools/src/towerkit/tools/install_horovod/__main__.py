"""``python -m towerkit.tools.install_horovod``."""

import sys

from towerkit.tools.install_horovod._cli import main

sys.exit(main())
