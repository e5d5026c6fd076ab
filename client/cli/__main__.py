"""``python -m client.cli``: the ``minibroker`` command, as the tests and the Makefile run it."""

import sys

from client.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
