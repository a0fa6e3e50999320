"""User-facing errors: anything a user can cause (bad path, bad trace, bad option) raises UserError,
which the CLI turns into one line on stderr and exit code 2."""


class UserError(Exception):
    """A problem with the user's input, reported without a traceback."""
