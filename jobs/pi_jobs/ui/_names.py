"""What each proprio/action dimension is called: the robot registry's `proprio_names` and
`action_names` of the episode's robot type (jobs/pi_jobs/stream/robots.toml, or the file
PILAKE_ROBOTS names), where the episode has that many dimensions; `proprio[3]` otherwise.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any


@dataclass
class DimensionNames:
    """The registry read once, on first use; a registry that does not load leaves index names
    and its error in `problem` (the pages say so rather than fail).

    Example:
        >>> DimensionNames(None).names("franka", "proprio", 8)[-1]
        'gripper_width'
        >>> DimensionNames(None).names("mystery", "action", 2)
        ('action[0]', 'action[1]')
    """

    path: str | None
    problem: str | None = None
    _registry: Any = field(default=None, repr=False)
    _loaded: bool = field(default=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def _load(self) -> Any:
        with self._lock:
            if not self._loaded:
                from pi_jobs.stream.contract import RegistryError, load_registry

                try:
                    self._registry = load_registry(self.path)
                except RegistryError as err:
                    self.problem = f"dimension names unavailable: {err}"
                self._loaded = True
            return self._registry

    def names(self, robot_type: str, kind: str, dim: int) -> tuple[str, ...]:
        """`dim` names of feature `kind` ("proprio" or "action") for `robot_type`."""
        registry = self._load()
        entry = registry.get(robot_type) if registry is not None else None
        named = tuple(getattr(entry, f"{kind}_names", ())) if entry is not None else ()
        if len(named) == dim:
            return named
        return tuple(f"{kind}[{d}]" for d in range(dim))
