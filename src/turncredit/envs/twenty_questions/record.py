"""What the 20 Questions environment records per turn beside its label (`Turn.record`).

A module of its own so the expert, which the environment builds, reads it without importing
the environment.
"""

from __future__ import annotations

from dataclasses import dataclass

from turncredit.episode import TurnRecord


@dataclass
class TwentyQuestionsRecord(TurnRecord):
    #: the category the question asked about, as the oracle parsed it (a WordNet lemma key);
    #: None when it named none or was invalid. The expert skips categories it has asked
    category: str | None = None
