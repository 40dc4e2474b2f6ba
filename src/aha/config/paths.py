"""Where a path written in a config points: the one rule every section follows."""

from pathlib import Path


def resolve_path(path: str | Path, base: str | Path) -> Path:
    """A path as given (absolute, or existing from the directory aha runs in), else relative to
    the config's folder (base), so a recipe runs from anywhere."""
    p = Path(path).expanduser()
    if p.is_absolute() or p.exists():
        return p
    return Path(base) / p
