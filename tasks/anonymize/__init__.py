"""Stage ``anonymize``: people replaced, blurred, reduced or blacked out, one output per method."""
