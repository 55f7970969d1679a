"""J24: the-loop's Markdown converted faithfully — to ADF for Cloud, to wiki markup for Data Center — and ADF read back
as Markdown (comments arriving from Cloud)."""

from __future__ import annotations

from the_loop_jira import markup

MARKDOWN = """# Plan

Some **bold**, *em*, ~~gone~~, `code` and a [link](https://example.test/x).

- one
- two
  - nested

1. first
2. second

- [ ] todo
- [x] done

```python
print("hi")
```

> quoted line"""

WIKI = """h1. Plan

Some *bold*, _em_, -gone-, {{code}} and a [link|https://example.test/x].

* one
* two
** nested

# first
# second

* (x) todo
* (/) done

{code:python}
print("hi")
{code}

{quote}
quoted line
{quote}"""


def test_j24_markdown_reaches_data_center_as_wiki_markup() -> None:
    assert markup.adf_to_wiki(markup.to_adf(MARKDOWN)).strip() == WIKI


def test_j24_markdown_survives_the_round_trip_through_adf() -> None:
    assert markup.to_markdown(markup.to_adf(MARKDOWN)).strip() == MARKDOWN


def test_j24_adf_marks_and_nodes_are_typed_not_flattened() -> None:
    adf = markup.to_adf(MARKDOWN)
    kinds = [node["type"] for node in adf["content"]]
    assert kinds == ["heading", "paragraph", "bulletList", "orderedList", "taskList", "codeBlock", "blockquote"]
    marks = {m["type"] for node in adf["content"][1]["content"] for m in node.get("marks", [])}
    assert marks == {"strong", "em", "strike", "code", "link"}


def test_a_mention_reads_as_its_display_text_in_both_targets() -> None:
    doc = {
        "type": "doc",
        "version": 1,
        "content": [
            {
                "type": "paragraph",
                "content": [
                    {"type": "mention", "attrs": {"id": "acc-1", "text": "@Dana"}},
                    {"type": "text", "text": " please look"},
                ],
            }
        ],
    }
    assert markup.to_markdown(doc).strip() == "@Dana please look"
    assert markup.adf_to_wiki(doc).strip() == "@Dana please look"


def test_j24_raw_html_is_dropped_but_a_summary_and_a_sentinel_survive() -> None:
    markdown = (
        "<details><summary>Plan</summary>\n\nthe plan\n\n</details>\n\n<!-- the-loop:phase-selection -->\n\n"
        '<div data-payload="{}">envelope</div>\n\n| a | b |\n|---|---|\n| 1 | **2** |'
    )
    adf = markup.to_adf(markdown)
    assert adf["content"][0] == {
        "type": "paragraph",
        "content": [{"type": "text", "text": "Plan", "marks": [{"type": "strong"}]}],
    }
    assert "envelope" not in str(adf) and "<" not in str(adf)
    assert markup.adf_to_wiki(adf) == "*Plan*\n\nthe plan\n\n[the-loop:phase-selection]\n\n||a||b||\n|1|*2*|"
    assert markup.to_markdown(adf).endswith("| a | b |\n| --- | --- |\n| 1 | **2** |")


def test_j25_only_a_top_level_opening_or_closing_sentinel_of_the_service_account_is_promoted() -> None:
    def doc(*blocks: dict[str, object]) -> dict[str, object]:
        return {"type": "doc", "version": 1, "content": list(blocks)}

    def para(text: str) -> dict[str, object]:
        return {"type": "paragraph", "content": [{"type": "text", "text": text}]}

    body = doc(para("[the-loop:gate]"), para("middle [the-loop:other]"), para("[the-loop:closing]"))
    assert markup.to_markdown(body, service_account=True) == (
        "<!-- the-loop:gate -->\n\nmiddle [the-loop:other]\n\n<!-- the-loop:closing -->"
    )
    assert markup.to_markdown(body) == "[the-loop:gate]\n\nmiddle [the-loop:other]\n\n[the-loop:closing]"
    nested = doc({"type": "blockquote", "content": [para("[the-loop:gate]")]})
    assert markup.to_markdown(nested, service_account=True) == "> [the-loop:gate]"
    trailers = doc(para("[the-loop:relay]"), para("[the-loop:agent-comment]"))
    assert markup.to_markdown(trailers, service_account=True) == "[the-loop:relay]\n\n[the-loop:agent-comment]"
    unknown = doc({"type": "panel", "content": [para("inside a panel")]}, {"type": "mediaSingle"})
    assert markup.to_markdown(unknown) == "inside a panel"


def test_j26_every_spelling_of_a_quoted_marker_is_defanged() -> None:
    quoted = "a the-loop:gate b the\\-loop:gate c the&#45;loop:gate d the-loop&#58;gate <!-- the-loop:keep -->"
    assert markup.defang(quoted) == (
        "a the\u2011loop:gate b the\u2011loop:gate c the\u2011loop:gate d the\u2011loop:gate <!-- the-loop:keep -->"
    )
    assert markup.defang("[the-loop:relay]") == "[the\u2011loop:relay]"  # a quoted trailer is dead too
