"""Hand-written conveniences on generated models (``tools/gen_models.py`` ``MIXINS``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, List

if TYPE_CHECKING:  # pragma: no cover
    from .models import Citation


class MemoryPackMixin:
    """Helpers of :class:`~cairn_memory.models.MemoryPack`."""

    @property
    def markdown(self) -> str:
        """The pack as Markdown for the prompt (``context_markdown``): every item quoted as
        data with its ``[n]`` citation marker, the citations, conflicts and unknowns."""
        return self.context_markdown  # type: ignore[attr-defined]

    @property
    def refs(self) -> List[str]:
        """The cited refs (``doc:<id>#<n>``, ``msg:<conversation>/<seq>``, ...), in marker order."""
        return [c.ref for c in self.citations]  # type: ignore[attr-defined]

    def citation(self, n: int) -> "Citation":
        """The citation behind marker ``[n]``."""
        for c in self.citations:  # type: ignore[attr-defined]
            if c.n == n:
                return c
        raise KeyError(n)
