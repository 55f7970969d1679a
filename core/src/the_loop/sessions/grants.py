"""``add-collaborator``, ``remove-collaborator``, ``add-channel``, ``remove-channel``: one implementation for the
ticket keyword (:mod:`the_loop.routing.commands`) and the CLI (``the-loop sessions add-collaborator …``).

The lists are :mod:`the_loop.control.grants`; what this adds is the conversation moving with a declared channel
(a new declaration opens the conversation in the room at once, :func:`the_loop.channels.conversations.relocate`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from the_loop.control import grants
from the_loop.sessions.operations import Done

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig
    from the_loop.refs import WorkItemRef

COMMANDS = ("add-collaborator", "remove-collaborator", "add-channel", "remove-channel")


def grant(
    config: LoadedConfig, ref: WorkItemRef, command: str, words: str, *, by: str, source: str, note: str = ""
) -> Done:
    """Run one grant command with its argument ``words``. ``Done.effect`` is the ``control.command`` effect when
    ``ok``, else the refusal reason (``missing-collaborator``, ``missing-channel``, ``channel-taken``,
    ``unknown-listen-mode``)."""
    if command in ("add-collaborator", "remove-collaborator"):
        people = grants.grantees(words)
        if not people:
            return Done(False, "missing-collaborator", "name the collaborator as @login (or slack:U…)")
        names = ", ".join(str(person) for person in people)
        if command == "add-collaborator":
            added = grants.add_collaborators(config, ref, people, by=by, source=source, note=note)
            effect = "added" if added else "already-collaborator"
            return Done(
                True, effect, f"{names} may now speak to {ref} (input only)" if added else f"{names}: already on {ref}"
            )
        removed = grants.remove_collaborators(config, ref, people)
        effect = "removed" if removed else "not-a-collaborator"
        return Done(True, effect, f"{names}: no longer on {ref}" if removed else f"{names}: not on {ref}")
    args = grants.channel_args(words)
    if args.problem:
        what = (
            "name the channel as slack@C… (its id)"
            if args.problem == "missing-channel"
            else "--listen takes all or mentions"
        )
        return Done(False, args.problem, what)
    if command == "remove-channel":
        effect = grants.undeclare_channel(config, ref, args)
        return Done(
            True, effect, f"{args.ref}: " + ("undeclared" if effect == "undeclared" else f"not declared by {ref}")
        )
    effect = grants.declare_channel(config, ref, args, by=by, source=source, note=note)
    if effect == "channel-taken":
        return Done(False, effect, f"{args.ref} is already declared by another work item")
    warnings = []
    from the_loop.channels import conversations

    moved = conversations.relocate(config, ref)
    if moved:
        warnings.append(moved)
    return Done(True, effect, f"{ref} is worked in {args.ref} (listen: {args.listen})", warnings=warnings)
