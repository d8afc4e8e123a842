"""``python -m jaxhc ...`` runs the ``jaxhc`` command line (see `jaxhc.cli`)."""

import sys

from jaxhc.cli import main

if __name__ == "__main__":
    sys.exit(main())
