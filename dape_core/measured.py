"""The compiled path's measured constants on CUDA, read from package data (``dape_core/config/measured/``).

``cuda_compiled_path.json`` holds what a device run decided, written only by ``benchmarks/adopt_device_run.py``:
``measured`` (the run, or "no run yet"), ``cuda_compiled_options``
(:data:`dape_core.settings.attention.CUDA_COMPILED_OPTIONS`) and ``compiled_kept_scale``
(:data:`dape_core.memory.COMPILED_KEPT_SCALE`). A leaf module (it imports only the package's errors), so the
torch-free settings and the memory model share it.
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path

from dape_core.errors import ConfigError

MEASURED = Path(__file__).resolve().parent / "config" / "measured"  # package data
COMPILED_PATH = MEASURED / "cuda_compiled_path.json"
COMPILED_PATH_KEYS = ("measured", "cuda_compiled_options", "compiled_kept_scale")
ADOPT_COMMAND = "python benchmarks/adopt_device_run.py RUN NAME"


def where(path: Path) -> str:
    """``path`` as the package names it (``dape_core/…``), wherever the package is installed."""
    try:
        return str(path.relative_to(Path(__file__).resolve().parents[1]))
    except ValueError:
        return str(path)


def read_compiled_path(path: Path = COMPILED_PATH) -> dict:
    """``path``'s three keys, checked for form (the settings check the options' values); a missing, damaged or
    foreign file is one line naming it."""
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict) or set(data) != set(COMPILED_PATH_KEYS):
            raise KeyError(f"keys {sorted(data) if isinstance(data, dict) else type(data).__name__}, "
                           f"allowed exactly {', '.join(COMPILED_PATH_KEYS)}")
        scale = data["compiled_kept_scale"]
        if not (isinstance(scale, (int, float)) and not isinstance(scale, bool) and math.isfinite(scale)
                and scale > 0) or not isinstance(data["cuda_compiled_options"], dict):
            raise ValueError("compiled_kept_scale: a positive number; cuda_compiled_options: an object")
    except (OSError, ValueError, KeyError) as err:
        raise ConfigError(f"{where(path)}: damaged ({type(err).__name__}: {err}); written only by "
                          f"`{ADOPT_COMMAND}`") from None
    return data


@lru_cache(maxsize=None)
def compiled_path() -> dict:
    """The committed :data:`COMPILED_PATH`, read once."""
    return read_compiled_path()
