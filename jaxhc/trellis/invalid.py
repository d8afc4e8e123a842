"""What the batch entry points do with problems (jets) that fail their energy's checks:
the ``on_invalid`` policy, the `InvalidProblems` report and the `InvalidProblemsError` that
names every bad problem.

``on_invalid="skip"`` (the default of every batch entry point) solves the valid problems,
gives the others ``NaN`` answers and no tree, warns once per call with the count and the
first reasons, and returns the full report with the result; ``"raise"`` raises
`InvalidProblemsError` (a ``ValueError``) naming every bad problem and why. A batch in which
every problem fails raises under both policies: nothing could be solved, and the cause is
then almost surely the whole input's (units, column order), not one jet's.

Why skip by default: a physicist solving a million generator jets wants the 999 999 good
ones solved and a record of the one that was not, not a run stopped at its first rounding
artefact; the warning and the per-problem ``valid`` flags keep the skip visible."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import jax

__all__ = ["ON_INVALID", "InvalidProblems", "InvalidProblemsError", "check_on_invalid"]

#: the policies of the batch entry points
ON_INVALID = ("skip", "raise")

#: a regular expression matching the warning of ``on_invalid="skip"`` (for
#: ``warnings.filterwarnings``: a loop over the partitions of a checked run silences it)
SKIP_WARNING = r"\w+: \d+ of \d+ problems fail the checks"

#: reasons written out in a message (every index is written)
_SHOWN = 10


def check_on_invalid(on_invalid) -> str:
    if not isinstance(on_invalid, str) or on_invalid not in ON_INVALID:
        raise ValueError(f"on_invalid must be 'skip' or 'raise', got {on_invalid!r}")
    return on_invalid


@dataclass(frozen=True)
class InvalidProblems:
    """The problems of a batch that failed the checks, in batch order.

    Fields:
      index: the positions of the bad problems in the caller's batch (a tuple of ints).
      reasons: why each failed (a tuple of strings naming the problem, the row and the check).
      num_problems: the size of the caller's batch.

    A static pytree node (no array leaves), so results holding it cross ``jax.tree_util``
    maps unchanged. ``bool(report)`` is True when some problem failed.
    """

    index: tuple = ()
    reasons: tuple = ()
    num_problems: int = 0

    def __bool__(self) -> bool:
        return len(self.index) > 0

    def __len__(self) -> int:
        return len(self.index)

    def summary(self, name: str = "leaves_padded", shown: int = _SHOWN) -> str:
        """One paragraph: how many failed, every index, the first ``shown`` reasons."""
        k = len(self.index)
        more = f" (and {k - shown} more: the report's .reasons holds each)" if k > shown else ""
        shown = "; ".join(self.reasons[:shown])
        idx = ", ".join(str(i) for i in self.index)
        return f"{name}: {k} of {self.num_problems} problems fail the checks (index {idx}): {shown}{more}"

    def merged(self, other: "InvalidProblems") -> "InvalidProblems":
        """Both reports, one entry per problem (this one's reason first), in batch order."""
        by = dict(zip(other.index, other.reasons))
        by.update(zip(self.index, self.reasons))
        order = sorted(by)
        return InvalidProblems(tuple(order), tuple(by[i] for i in order), max(self.num_problems, other.num_problems))

    @staticmethod
    def from_reasons(reasons: dict, num_problems: int) -> "InvalidProblems":
        order = sorted(reasons)
        return InvalidProblems(tuple(int(i) for i in order), tuple(reasons[i] for i in order), int(num_problems))


jax.tree_util.register_static(InvalidProblems)


class InvalidProblemsError(ValueError):
    """``on_invalid="raise"``: the batch holds problems that fail the checks; the message
    names every one (index) and the first reasons, ``.invalid`` holds the `InvalidProblems`
    report."""

    def __init__(self, invalid: InvalidProblems, name: str = "leaves_padded"):
        hint = " (on_invalid='skip' solves the others)" if invalid.num_problems > len(invalid) else ""
        super().__init__(invalid.summary(name) + hint)
        self.invalid = invalid


def apply_policy(invalid: InvalidProblems, on_invalid: str, name: str = "leaves_padded", stacklevel: int = 3):
    """Raises (``"raise"``, or when every problem fails: then nothing could be solved and the
    cause is almost surely the whole input's, e.g. FastJet's column order) or warns
    (``"skip"``) when ``invalid`` holds a problem."""
    if not invalid:
        return
    if on_invalid == "raise" or len(invalid) >= invalid.num_problems:
        raise InvalidProblemsError(invalid, name)
    warnings.warn(
        invalid.summary(name, shown=3) + "; they are skipped (NaN log Z, no tree; on_invalid='raise' raises instead)",
        RuntimeWarning,
        stacklevel=stacklevel,
    )
