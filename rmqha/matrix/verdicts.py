"""The audit's verdicts as the matrix keys them: by (id, subject), never by name (tests/unit/matrix/test_cells.py)."""

from __future__ import annotations

from rmqha.pipeline import ids


def verdict_key(v: dict) -> tuple[str, str]:
    """(id, subject) of one verdict of summary.json. A summary written before every verdict had an id names
    some only: the pipeline's own table gives their ids (rmqha/pipeline/ids.py id_of_name); ("", subject)
    for a name it does not know."""
    if v.get("id"):
        return v["id"], v.get("subject") or ""
    return ids.id_of_name(v.get("name") or "") or ("", v.get("subject") or "")
