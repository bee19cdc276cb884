"""What the fork server of the reader processes imports (readahead.py): the readers' modules,
with pandas and polars refused first, so that neither the server nor a reader forked from
it carries them (without_dataframes.py). Only the fork server imports this module.

The imported objects are then frozen out of the garbage collector's sweeps, so that a
reader's collections do not write to (and so copy) the pages it shares with the server.
"""

import gc

from remote_agent import without_dataframes

without_dataframes.install()

from remote_agent import readahead  # noqa: E402, F401 - imported for the fork server, after the refusal

gc.freeze()
