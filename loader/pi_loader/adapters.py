"""Framework adapters (torch, Grain, JAX): the public module `pi_loader.adapters`.

They live in `pi_loader.delivery.adapters` beside the Loader they wrap; this module keeps the
import path users and the reference trainer already use.

Example:
    >>> from pi_loader.adapters import to_torch
"""

from pi_loader.delivery.adapters import *  # noqa: F403
from pi_loader.delivery.adapters import __all__ as __all__
