"""A corrupt sidecar is moved aside together with its session ``.md`` (one timestamp)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.plan.lifecycle_helpers import SID, make_harness


async def test_corrupt_sidecar_moves_its_md_aside_too(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    h.session_folder().mkdir(parents=True)
    h.json_path().write_text("{not json")
    h.md_path().write_text("# The old plan\n")
    assert await h.plans.state(SID) == "none"
    assert h.plans.take_notices(SID)
    moved = sorted(p.name for p in h.session_folder().iterdir() if ".corrupt-" in p.name)
    assert len(moved) == 2, moved
    stamps = {m.rsplit(".corrupt-", 1)[1] for m in moved}
    assert len(stamps) == 1
    (stamp,) = stamps
    assert re.fullmatch(r"\d{8}T\d{12}Z", stamp)
    assert moved == [
        f".plangate_plan_{SID}.json.corrupt-{stamp}",
        f".plangate_plan_{SID}.md.corrupt-{stamp}",
    ]
    assert (h.session_folder() / moved[1]).read_text() == "# The old plan\n"
    assert not h.md_path().exists()
    # A later pre-init sidecar is pre-init, not post-init with the old text.
    assert (await h.plans.enter_pre_init(SID)).ok
    assert await h.fresh().plans.state(SID) == "pre_init"
