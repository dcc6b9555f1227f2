"""`python -m rmqha.chaos.matrix`: the guarantee matrix's old name, kept for the commands in docs/ and
earlier matrix tables; the matrix is rmqha/matrix/ (`python -m rmqha.matrix`), a layer above chaos. This
alias is the one import of it from chaos/ (an exception in pyproject.toml's layer contract)."""

import sys

from rmqha.matrix.cli import main

if __name__ == "__main__":
    sys.exit(main(prog="python -m rmqha.chaos.matrix"))
