"""The one exception type the CLI turns into a one-line error."""


class DeschedError(Exception):
    """Bad input or a refused operation; its message is one line that names the culprit."""
