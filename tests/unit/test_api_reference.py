"""docs/API.md is the service's OpenAPI spec, rendered."""

from pathlib import Path

import pytest

pytestmark = pytest.mark.unit


def test_docs_api_md_is_current():
    from mysqlcdc.api.reference import render

    page = Path(__file__).resolve().parents[2] / "docs" / "API.md"
    assert page.read_text() == render(), "run: python -m mysqlcdc.api.reference > docs/API.md"
