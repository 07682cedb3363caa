"""Configuration errors: every message names the field and the allowed values."""

from __future__ import annotations

from typing import Any, Iterable


class ConfigError(ValueError):
    """A wrong setting; the message names the field and the allowed values."""


def require_choice(field: str, value: Any, allowed: Iterable[Any]) -> Any:
    allowed = list(allowed)
    if value not in allowed:
        raise ConfigError(f"{field}: {value!r} is not allowed; allowed values: {', '.join(map(str, allowed))}")
    return value


def require_positive(field: str, value: Any, *, integer: bool = True) -> Any:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
    if not ok or (integer and not float(value).is_integer()):
        kind = "a positive integer" if integer else "a positive number"
        raise ConfigError(f"{field}: {value!r} is not allowed; allowed values: {kind}")
    return value


def require_odd_kernel(field: str, value: Any) -> int:
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1 and value % 2 == 1):
        raise ConfigError(f"{field}: {value!r} is not allowed; allowed values: an odd positive integer (1, 3, 5, ...)")
    return value


class ArtefactError(ValueError):
    """A damaged, cut or foreign file: the message names the file, what is wrong and the command that redoes it."""


class WriteFailure(OSError):
    """An output that could not be written (a full disk, a file-size limit, a read-only or failing device): the
    message names the file and the cause with its errno; the file's previous version, if any, is unchanged."""
