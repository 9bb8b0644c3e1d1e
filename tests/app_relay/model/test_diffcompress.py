"""Compressing a diff into a budget: the telling hunks first, the rest named or counted."""

from __future__ import annotations

import re

from diffsamples import git_diff, mixed_diff, numbered

from app_relay.model.diffcompress import MAX_PIECE_LINES, compress_diff


def test_manifests_ci_and_scripts_go_in_first_and_the_rest_is_named(tmp_path):
    compressed = compress_diff(mixed_diff(tmp_path), 1_000)

    assert compressed.tokens <= 1_000
    assert compressed.share_kept(["manifest", "ci", "script"]) == 1.0
    assert compressed.kept["code"][0] < compressed.kept["code"][1]
    text = compressed.text
    assert "### setup.py (manifest; added" in text
    assert "### .github/workflows/ci.yml (ci; added" in text
    assert "### scripts/build.sh (script; added" in text
    assert dict(compressed.named) == {
        "poetry.lock": "lock",
        "vendor/lib.js": "vendored",
        "dist/bundle.min.js": "generated",
    }
    listing = compressed.listing
    assert "- poetry.lock: reduced to its name (lock)" in listing
    assert "- legacy.py: 1 deletion-only hunk(s) (-30 lines) reduced to a count" in listing
    assert re.search(r"- app\.py: 1 of 1 hunk\(s\) left out", listing)
    assert "lock 1" not in text
    assert "vendored 1" not in text


def test_with_room_enough_every_hunk_is_shown_in_diff_order(tmp_path):
    compressed = compress_diff(mixed_diff(tmp_path), 24_000)

    assert compressed.share_kept(["manifest", "ci", "script", "code", "docs"]) == 1.0
    assert compressed.left_out == ()
    headings = re.findall(r"^### (\S+)", compressed.text, re.MULTILINE)
    assert headings == [".github/workflows/ci.yml", "app.py", "notes.md", "scripts/build.sh",
                        "setup.py"]  # fmt: skip
    assert compressed.shown == tuple(f"diff:hunk:{n}" for n in range(1, len(compressed.shown) + 1))


def test_a_long_new_file_is_shown_in_part_when_it_does_not_fit_whole(tmp_path):
    diff = git_diff(tmp_path, {"a.py": "a = 1\n"}, {"big.py": numbered(5 * MAX_PIECE_LINES)})

    compressed = compress_diff(diff, 1_500)

    assert compressed.tokens <= 1_500
    assert "(part 1 of 5)" in compressed.text
    assert "(part 5 of 5)" not in compressed.text
    assert "- big.py: 1 of 1 hunk(s) left out" in compressed.listing
    assert compressed.kept["code"] == (0, 1)


def test_the_listing_counts_what_it_cannot_name(tmp_path):
    diff = "".join(
        f"diff --git a/vendor/m{n}.js b/vendor/m{n}.js\nnew file mode 100644\n"
        f"--- /dev/null\n+++ b/vendor/m{n}.js\n@@ -0,0 +1 @@\n+x\n"
        for n in range(3_000)
    )

    compressed = compress_diff(diff, 2_000)

    assert compressed.tokens <= 2_000
    assert len(compressed.named) == 3_000
    assert re.search(r"- and \d+ more file\(s\) not shown in full$", compressed.listing)


def test_hidden_characters_in_a_diff_are_shown_not_kept(tmp_path):
    trojan = 'access = "user\u202e \u2066// admin\u2069 \u2066"\n'
    diff = git_diff(tmp_path, {"a.py": "x = 1\n"}, {"a.py": "x = 1\n" + trojan})

    compressed = compress_diff(diff, 5_000)

    assert "<U+202E>" in compressed.text
    assert "\u202e" not in compressed.text
