"""The test helpers under ``plugins/`` (``prefork``) importable by name from every test here."""

import sys
from pathlib import Path

PLUGINS = Path(__file__).resolve().with_name("plugins")
if str(PLUGINS) not in sys.path:
    sys.path.append(str(PLUGINS))
