"""Errors caused by what the user asked for: the CLI prints them on one line and exits 2."""


class UserError(Exception):
    """Bad input: a config, an override, an env or a run directory we cannot use."""


class ConfigError(UserError, ValueError):
    """A config that cannot be loaded or does not validate."""


class EnvSpecError(UserError, ValueError):
    """An environment whose outputs disagree with its declared spaces or API."""


def require(ok: bool, key: str, value, requirement: str) -> None:
    """Raise a one-line ConfigError naming `key` unless `ok`."""
    if not ok:
        raise ConfigError(f"{key} must be {requirement}, got {value!r}")
