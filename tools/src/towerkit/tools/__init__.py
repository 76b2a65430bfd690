"""towerkit.tools: command-line tools, one module and one console script each.

- ``ls-checkpoint`` (`towerkit.tools.ls_checkpoint`): list a checkpoint's variables.
- ``dump-params`` / ``load-params``: convert between checkpoints and npz files.
- ``plot-stats``: plot the statistics a run wrote (``stats.json``).
- ``timeline``: print when each callback of a run fires, without TensorFlow.
- ``install-horovod`` (`towerkit.tools.install_horovod`): build horovod with gloo
  against the installed TensorFlow, with a wheel cache.
- ``bump-version``, ``public-symbols``: release chores for the libs.

Each has a ``main(argv=None) -> int``; run one as ``python -m towerkit.tools.<module>``.

`import_tensorflow_quietly` gives a script the tools' quiet start: TensorFlow
imported without its start-up lines.
"""

from towerkit.tools._cli import import_tensorflow_quietly
from towerkit.tools._version import __version__

__all__ = ["__version__", "import_tensorflow_quietly"]
