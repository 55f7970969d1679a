"""``the-loop init --slack CHANNEL``: Slack's part of a new config, checked against Slack first.

The bot token is read from ``THE_LOOP_SLACK_BOT_TOKEN`` (``channels.slack.botTokenEnv``'s default; never written),
Slack is asked whose it is (``auth.test``) and whether the bot can read the channel (``conversations.info``). The
part it writes publishes each work item's conversation into a thread of that channel and reads replies by polling,
so it needs no app token and no public URL.
"""

from __future__ import annotations

from typing import Any

from the_loop.interfaces import Finding, SetupRequest, SetupResult


def slack(request: SetupRequest) -> SetupResult:
    import os

    from slack_sdk import WebClient
    from slack_sdk.errors import SlackApiError, SlackRequestError

    from the_loop_slack.config import SlackSettings

    channel = request.value.strip()
    if channel[:1] not in ("C", "G") or not channel.isalnum() or not channel.isupper():
        return SetupResult.refused(
            Finding(
                f"--slack: {channel!r} is not a channel id",
                "name the channel by its id (C…): Slack shows it at the bottom of the channel's details",
            )
        )
    defaults = SlackSettings()
    api_url = request.options.get("slack-api-url", "").strip()
    variable = defaults.bot_token_env
    token = os.environ.get(variable, "").strip()
    if not token:
        return SetupResult.refused(
            Finding(
                f"no Slack bot token: {variable} is not set",
                f"export {variable} with the bot token (xoxb-…) of a Slack app with chat:write and channels:history",
            )
        )
    base = api_url or defaults.api_base_url
    client = WebClient(token=token, base_url=base if base.endswith("/") else base + "/", timeout=30)
    notes: list[str] = []

    def ask(method: str, **params: Any) -> Any:
        try:
            return client.api_call(method, params=params)
        except SlackApiError as exc:
            return {"ok": False, "error": str(exc.response.get("error") or "error")}
        except (SlackRequestError, OSError) as exc:
            return {"ok": False, "error": f"no answer ({type(exc).__name__})"}

    who = ask("auth.test")
    if not who.get("ok"):
        finding = Finding(
            f"Slack refused the bot token from {variable} ({who.get('error')})",
            f"export {variable} with a valid bot token (xoxb-…) of the app installed in the workspace",
        )
        return SetupResult(
            findings=[finding], notes=[f"[!] {finding.problem}", f"     fix: {finding.remedy}"], usable=False
        )
    notes.append(f"[ok] the bot token from {variable} is {who.get('user_id') or 'a bot'}'s")
    findings = []
    found = ask("conversations.info", channel=channel)
    if found.get("ok"):
        notes.append(f"[ok] the bot can read {channel}")
    else:
        finding = Finding(
            f"the bot cannot read {channel} ({found.get('error')})",
            f"invite it: /invite @<your app> in {channel} (and give the app channels:history or groups:history)",
        )
        findings.append(finding)
        notes += [f"[!] {finding.problem}", f"     fix: {finding.remedy}"]
    part: dict[str, Any] = {"enabled": True, "channel": channel}
    if api_url:
        part["apiBaseUrl"] = api_url
    return SetupResult(
        config={"channels": {"slack": part}},
        findings=findings,
        notes=notes,
        summary=[f"each work item's conversation goes into a thread of Slack channel {channel}; replies come back"],
    )
