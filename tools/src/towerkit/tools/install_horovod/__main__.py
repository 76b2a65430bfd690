"""``python -m towerkit.tools.install_horovod``."""

from towerkit.tools.install_horovod._install import main

raise SystemExit(main())
