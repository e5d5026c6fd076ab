"""bench/RESULTS.md's sections and the notes written by hand after them (bench.run)."""

from __future__ import annotations

from bench.run import _previous_notes, _previous_sections

TEXT = """# Benchmark results

<!-- bench:a -->
## A
| x | 1 |
<!-- /bench:a -->

Reading (by hand): what a means.

<!-- bench:b -->
## B
<!-- /bench:b -->
<!-- bench:c -->
## C
<!-- /bench:c -->

Note: about c, at the end.
"""


def test_a_note_after_a_section_is_found_with_it_and_sections_without_have_none() -> None:
    assert set(_previous_sections(TEXT)) == {"a", "b", "c"}
    assert _previous_notes(TEXT) == {
        "a": "Reading (by hand): what a means.",
        "c": "Note: about c, at the end.",
    }
