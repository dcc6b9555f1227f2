"""`python -m rmqha.matrix`: rmqha/matrix/cli.py."""

import sys

from rmqha.matrix.cli import main

sys.exit(main())
