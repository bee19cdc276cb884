"""`python -m deltasieve_cli`: the same as the `deltasieve` console script."""

from .main import main

main()
