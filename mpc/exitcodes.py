"""Exit codes of party processes and of the ``sqm`` command (one table, documented in the README)."""
from __future__ import annotations

EXIT_OK = 0
EXIT_ERROR = 1  # an unexpected error
EXIT_REFUSED = 3  # a party refused the job (mismatched configuration, bad input, a malformed message)
EXIT_LOST = 4  # a peer's connection dropped
EXIT_TIMEOUT = 5  # the job did not finish in time
