"""The one progress-bar helper of jaxhc: a tqdm bar over a chain's iterations (or any other
count) that can be switched off, with NumPyro's description (``"<name> warmup"`` while the
warm-up runs, ``"<name> sample"`` after it), ticked from the host (`Progress.update`) or from
inside a compiled program (``jax.debug.callback(tick, token, n)``).

Usage::

    with progress(total, "DPM Gibbs", enabled=progress_bar, num_warmup=num_warmup) as bar:
        ...
        bar.update(n)              # host side
        bar.token                  # for jax.debug.callback(tick, bar.token, 1) in a jitted loop
"""

from __future__ import annotations

import itertools
import threading
from typing import Optional

__all__ = ["Progress", "progress", "tick"]

_BARS: dict = {}  # token -> open Progress (for ticks from compiled code)
_TOKENS = itertools.count(1)
_LOCK = threading.Lock()


class Progress:
    """A tqdm bar over ``total`` iterations, or a no-op when ``enabled`` is false.

    Args:
      total: iterations (warm-up included).
      name: what runs ("DPM Gibbs", "bhmc", ...). With ``num_warmup`` given, the description
        is ``"<name> warmup"`` for the first ``num_warmup`` iterations and ``"<name> sample"``
        afterwards (as NumPyro's bar); otherwise it is ``name``.
      enabled: False makes every method a no-op (nothing imported, nothing drawn).
      num_warmup: warm-up iterations (None: no warmup/sample phases in the description).
      leave: keep the finished bar on screen (tqdm's ``leave``).

    Attributes:
      token: an int naming this bar for `tick` (0 when disabled); pass it to compiled code as
        a traced argument so one program serves every bar.
    """

    def __init__(
        self, total: int, name: str, *, enabled: bool = True, num_warmup: Optional[int] = None, leave: bool = True
    ):
        self.total, self.name, self.num_warmup = int(total), name, num_warmup
        self.count = 0
        self.token = 0
        self._bar = None
        if not enabled:
            return
        from tqdm.auto import tqdm

        self._bar = tqdm(total=self.total, desc=self._desc(), leave=leave)
        with _LOCK:
            self.token = next(_TOKENS)
            _BARS[self.token] = self

    @property
    def enabled(self) -> bool:
        return self._bar is not None

    def _desc(self) -> str:
        if self.num_warmup is None:
            return self.name
        return f"{self.name} {'warmup' if self.count < self.num_warmup else 'sample'}"

    def update(self, n: int = 1) -> None:
        """Advances the bar by ``n`` iterations (switching the description to ``sample`` once
        the warm-up is done)."""
        if self._bar is None:
            return
        was = self._desc()
        self.count += int(n)
        now = self._desc()
        if now != was:
            self._bar.set_description(now, refresh=False)
        self._bar.update(int(n))

    def set_postfix(self, **kwargs) -> None:
        """tqdm's ``set_postfix`` (e.g. the current log likelihood)."""
        if self._bar is not None:
            self._bar.set_postfix(**kwargs)

    def close(self) -> None:
        if self._bar is None:
            return
        with _LOCK:
            _BARS.pop(self.token, None)
        self._bar.close()
        self._bar = None

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def progress(
    total: int, name: str, *, enabled: bool = True, num_warmup: Optional[int] = None, leave: bool = True
) -> Progress:
    """A `Progress` bar (a context manager that closes it); see `Progress` for the arguments."""
    return Progress(total, name, enabled=enabled, num_warmup=num_warmup, leave=leave)


def tick(token, n) -> None:
    """Host callback for compiled loops: ``jax.debug.callback(tick, token, n)`` advances the bar
    named ``token`` by ``n`` (no-op for a closed or disabled bar, token 0)."""
    bar = _BARS.get(int(token))
    if bar is not None:
        bar.update(int(n))
