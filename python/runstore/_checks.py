"""Run ids, steps and step windows as the core takes them, checked before they reach it."""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

RunId = int | str
#: A window of steps, start <= step < stop: ``range(start, stop)`` or ``(start, stop)``.
StepWindow = range | tuple[int, int]
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def check_step(step: Any, what: str = "step") -> int:
    """``step`` as an int; TypeError for a bool ("step must be an int, got bool"), a float or
    anything else that is not an integer, as the core refuses them (python/src/convert.h)."""
    if isinstance(step, (bool, np.bool_)) or not hasattr(type(step), "__index__"):
        raise TypeError(f"{what}: step must be an int, got {type(step).__name__}")
    return operator.index(step)


def check_run_id(run: Any, what: str = "run id") -> RunId:
    """``run`` as an int or a str; TypeError for a bool ("run id must be an int or a str, got
    bool") and anything else that is neither, as the core refuses them."""
    if isinstance(run, str):
        return run
    if isinstance(run, (bool, np.bool_)) or not hasattr(type(run), "__index__"):
        raise TypeError(f"{what} must be an int or a str, got {type(run).__name__}")
    return operator.index(run)


def step_range(steps: StepWindow | None) -> tuple[int, int] | None:
    """``start <= step < stop`` as the inclusive (first, last) the core takes."""
    if steps is None:
        return None
    if isinstance(steps, range):
        if steps.step != 1:
            raise ValueError(f"steps must be a range with step 1, got {steps!r}")
        start, stop = steps.start, steps.stop
    else:
        try:
            start, stop = steps
        except (TypeError, ValueError):
            raise TypeError(
                f"steps must be (start, stop) or a range of ints, got {steps!r}"
            ) from None
        start, stop = check_step(start, "steps"), check_step(stop, "steps")
    if stop <= start or stop <= _INT64_MIN or start > _INT64_MAX:
        return (1, 0)  # no step
    return (max(start, _INT64_MIN), min(stop - 1, _INT64_MAX))
