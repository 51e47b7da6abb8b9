"""The one error of a bad run config (its own module: the catalogue raises it without importing the config)."""


class ConfigError(ValueError):
    """A run-config key is unknown, mistyped or out of range. The message names the key."""
