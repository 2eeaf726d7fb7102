"""The reference's API data (orca.core.testing.reference_api): orca.core's own signatures, the
keyword arguments init_orca_context takes or refuses, the checker's ability to fail, and
docs/reference-diff.md generated from the data. Reads signatures only: no Spark, no Ray."""

from pathlib import Path

import pytest

from orca.core._spark_conf import SPARK_OPTIONS
from orca.core.context import CONTEXT_OPTIONS, _validate
from orca.core.testing.reference_api import (
    HAND_WRITTEN,
    KWARGS,
    REFERENCE_API,
    SAME,
    UNSUPPORTED,
    Arg,
    Method,
    markdown,
    signature_problems,
)

DOC = Path(__file__).resolve().parents[3] / "docs" / "reference-diff.md"
INIT = next(m for m in REFERENCE_API["core"] if m.call == "init_orca_context")


def test_the_reference_api_data_matches_orca_core_signatures() -> None:
    problems = signature_problems("core")
    assert not problems, "reference_api data and Orca differ:\n" + "\n".join(problems)


@pytest.mark.parametrize("name", [a.name for a in INIT.args if a.status == KWARGS])
def test_init_orca_context_takes_the_reference_keyword(name: str) -> None:
    assert name in SPARK_OPTIONS | CONTEXT_OPTIONS


@pytest.mark.parametrize("name", [a.name for a in INIT.args if a.status == UNSUPPORTED])
def test_init_orca_context_refuses_the_unsupported_keyword_by_name(name: str) -> None:
    with pytest.raises(TypeError, match=f"unknown argument '{name}'"):
        _validate("local", 2, "2g", 1, "spark", None, {name: "x"})


def test_the_checker_reports_a_wrong_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    wrong = (
        Method("zip", "orca.core:XShards.zip", (Arg("other", UNSUPPORTED),), positional=1),
        Method("partition", "orca.core:XShards.partition", (Arg("data", SAME), Arg("num_shards", SAME, default=4)), 2),
        Method("collect", "orca.core:XShards.collect", missing=True),
        Method("to_spark_df", "orca.core:XShards.nope"),
    )
    monkeypatch.setitem(REFERENCE_API, "core", wrong)
    problems = "\n".join(signature_problems("core"))
    assert "`other` is said not supported but is a named parameter" in problems
    assert "`num_shards` default: reference 4, Orca None" in problems
    assert "Orca's `backend` is not in the data" in problems
    assert "collect (orca.core:XShards.collect): the data says missing=True" in problems
    assert "to_spark_df (orca.core:XShards.nope): the data says missing=False" in problems


def test_the_docs_page_is_the_data() -> None:
    page = DOC.read_text()
    assert HAND_WRITTEN in page, f"{DOC} lost its hand-written tail: regenerate it with markdown(keep=page)"
    assert page == markdown(keep=page), (
        f"{DOC} differs from orca.core.testing.reference_api; regenerate it (the hand-written tail is kept): "
        "python -c \"from pathlib import Path; from orca.core.testing.reference_api import markdown; "
        "p = Path('docs/reference-diff.md'); p.write_text(markdown(keep=p.read_text()))\"")


def test_markdown_keeps_the_hand_written_tail_and_regenerates_the_rest() -> None:
    tail = f"{HAND_WRITTEN}\n\n## By hand\n\n| a | 1 |\n"
    page = markdown(keep="an outdated generated part\n" + tail)
    assert page.endswith("\n" + tail)
    assert page.startswith(markdown())
    assert markdown(keep="no marker on this page") == markdown()


def test_every_reference_argument_is_on_the_page() -> None:
    page = DOC.read_text()
    for framework, methods in REFERENCE_API.items():
        for method in methods:
            assert f"`{method.call}`" in page, (framework, method.call)
            for arg in method.args:
                assert f"| `{arg.name}` |" in page, (framework, method.call, arg.name)
