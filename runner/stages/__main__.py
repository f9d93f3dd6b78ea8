"""``python -m knowgic.runner.stages prepare | edit | score``: see :mod:`knowgic.runner.stages.cli`."""

import sys

from knowgic.runner.stages.cli import main

if __name__ == "__main__":
    sys.exit(main())
