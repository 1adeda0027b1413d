"""Every executed chapter of the built book downloads as a notebook with its outputs."""
import json
import re

import pytest

pytestmark = pytest.mark.slow


def test_every_executed_chapter_offers_its_notebook_with_outputs(built_book):
    executed = sorted((built_book.parent / "jupyter_execute" / "chapters").glob("*.ipynb"))
    assert len(executed) >= 10, executed
    for path in executed:
        page = (built_book / "chapters" / path.name).with_suffix(".html").read_text()
        link = re.search(r'href="(\.\./_sources/chapters/[\w-]+\.ipynb)"', page)
        assert link and "download-notebook-button" in page, path.stem
        nb = json.loads((built_book / "chapters" / link.group(1)).resolve().read_text())
        assert any(c.get("outputs") for c in nb["cells"] if c["cell_type"] == "code"), path.stem
