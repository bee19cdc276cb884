"""`python -m deltasieve_cli`: the same as the `deltasieve` console script."""

from deltasieve_cli.main import main

main()
