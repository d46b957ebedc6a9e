"""``python -m sklearn_meanfield``: the demo (see :mod:`sklearn_meanfield._demo`)."""

import sys

from sklearn_meanfield._demo import main

if __name__ == "__main__":
    sys.exit(main())
