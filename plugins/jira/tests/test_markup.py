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
