"""Attachment names and frames (issue-416): a saved name is one path component that cannot leave its directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from the_loop.channels.attachments import NAME_LIMIT, Saved, mirror_names, pane_frame, safe_name


@pytest.mark.parametrize(
    "hostile",
    ["../../etc/passwd", "..", ".", "", "a/b\\c", "\x00evil", ".hidden", "line\nbreak\r\t", "-rf", "…/..//x"],
)
def test_a_hostile_name_becomes_one_safe_component(hostile: str) -> None:
    name = safe_name(hostile)
    assert name and "/" not in name and "\\" not in name and ".." not in name
    assert not name.startswith((".", "-")) and all(ch.isprintable() for ch in name)
    assert (Path("/base") / name).parent == Path("/base")


def test_a_long_name_is_capped_keeping_its_extension() -> None:
    name = safe_name("x" * 500 + ".png")
    assert len(name) <= NAME_LIMIT and name.endswith(".png")


def test_the_pane_frame_is_labelled_untrusted_and_names_only_kinds_and_paths() -> None:
    frame = pane_frame(Saved(saved=[("image/png", Path("/s/F1-a.png"))], named=["b.txt"], refused=["c\n.sh"]))
    assert "Attached files (untrusted, saved by the-loop, not opened):" in frame
    assert "- image/png /s/F1-a.png" in frame and "b.txt" in frame and "c.sh" in frame
    assert pane_frame(Saved()) == ""


def test_the_mirror_names_files_with_https_permalinks_only() -> None:
    text = mirror_names(
        ({"name": "a.png", "permalink": "https://x.slack.com/files/F1"}, {"name": "b", "permalink": "javascript:x"})
    )
    assert "- a.png (https://x.slack.com/files/F1)" in text and "- b\n" not in text and "javascript" not in text
