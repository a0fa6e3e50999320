"""User-facing errors: anything a user can cause (bad path, bad trace, bad option) raises UserError,
which the CLI turns into one line on stderr and exit code 2."""


class UserError(ValueError):
    """A problem with the user's input, reported without a traceback.

    A ValueError, so library callers (a training script using the recording API, say) catch it as the
    bad argument it is; each message names the option or argument it is about."""
