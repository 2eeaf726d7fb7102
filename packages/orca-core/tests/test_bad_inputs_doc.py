"""docs/bad-inputs.md is the table of the bad-input matrix, generated from it: it cannot drift."""

from pathlib import Path

from orca.core.testing.bad_inputs import BAD_INPUTS, DOC_HEADER, markdown_table

DOC = Path(__file__).resolve().parents[3] / "docs" / "bad-inputs.md"


def test_the_docs_table_is_the_matrix() -> None:
    expected = DOC_HEADER + markdown_table()
    assert DOC.read_text() == expected, (
        f"{DOC} differs from the bad-input matrix; regenerate it: python -c \"from orca.core.testing.bad_inputs "
        "import DOC_HEADER, markdown_table; print(DOC_HEADER + markdown_table(), end='')\" > docs/bad-inputs.md")


def test_the_matrix_has_at_least_30_distinct_cases() -> None:
    assert len({c.name for c in BAD_INPUTS}) == len(BAD_INPUTS) >= 30
