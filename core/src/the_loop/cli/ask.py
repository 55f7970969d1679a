"""``the-loop ask``: the agent asks its humans a question. The ``waiting_for_input`` lifecycle point is asked first
(a hook may reword the question), then the question is posted as a marked comment on the work item and the wait
recorded as ``session.awaiting_input`` (the comment id, never the text).

Then the question is published to the work item's channels (``session.awaiting_input``; queued when none takes it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from the_loop import events
from the_loop.cli.comment import WORK_ITEM, post_marked
from the_loop.command import app, print_json

if TYPE_CHECKING:
    from the_loop.refs import WorkItemRef


@click.command()
@WORK_ITEM
@click.option("--question", required=True, metavar="TEXT", help="The question for the people on the work item.")
@click.pass_context
def ask(ctx: click.Context, ref: WorkItemRef, question: str) -> None:
    """Ask a question on the work item and record that the session waits for an answer. Prints
    {"workItem", "commentId"} as JSON."""
    from the_loop.hooks.lifecycle import decide

    if not question.strip():
        raise click.BadParameter("the question is empty", param_hint="--question")
    config = app(ctx).config()
    decided = decide("waiting_for_input", str(ref), {"kind": "question", "question": question}, config)
    text = getattr(decided, "question", "") or question
    comment_id = post_marked(config, ref, text)
    events.emit("session.awaiting_input", work_item=str(ref), comment_id=comment_id, kind="question")
    from the_loop.sessions import operations

    operations.ask(config, ref, text, comment_id)  # open until a person answers (the web control plane shows it)
    from the_loop import channels

    channels.publish(config, "session.awaiting_input", ref, text=text, source="agent")
    print_json({"workItem": str(ref), "commentId": comment_id})
