"""``the-loop init``: write a new ``cli-config.yaml``.

Bare, it writes the commented starter: ``version`` set and every other main key listed commented out with its
default, so the file documents itself and passes ``the-loop config validate`` as written.

With an installed plugin's option (``--github OWNER/REPO``, ``--jira SITE/PROJECT``, ``--slack CHANNEL``: whatever
the plugins declare with ``loop_register_setup``), or run in a terminal with none (it asks), it writes a config that
works at once: routing on, a session for an item that carries the arming label and a ``the-loop start`` comment
(``spawnOnUnmatched: labeled``), the default harness checked to be installed and runnable, and each plugin's part,
which the plugin checks against its service first. It says what it wrote and what is left to do.

The config is written through the same loader that reads it, so what init writes always loads. An existing file
is never replaced without ``--force``: init shows the difference instead. Exit 0 when nothing is left to fix; 1 when
a finding is (each with its remedy; the config is still written unless a plugin found nothing to point it at, such as
a token GitHub refuses); 2 when it could not run.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from the_loop.command import AppContext, app, config_path_option, target_config_path

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig
    from the_loop.interfaces import SetupResult, SetupSpec

STARTER = """\
# the-loop configuration for this machine: which ingresses run, how work is routed, where state lives.
# Every key below is optional; the commented values are the defaults. Check edits with
# `the-loop config validate`, and see everything in effect with `the-loop config show`.
#
# Secrets never go in this file. Keys ending in `Env` name the environment variable that holds a secret;
# export it, or put NAME=value lines in the file named by env.file (mode 600).
version: "{version}"

# state:
#   root: .the-loop            # relative paths are anchored beside this file (its parent when in .the-loop/)

# env:
#   file: ""                   # NAME=value secrets file, loaded first; never overrides a set variable
#   sessionPassthrough: []     # non-secret variable names handed to agent sessions

# eventLog:
#   enabled: true
#   path: ""                   # default <state.root>/logs/events.jsonl

# repositories: []             # [HOST/]OWNER/REPO the poller and the receiver accept

# webhooks:
#   ghWebhook:
#     enabled: false           # run the HTTP receiver (`the-loop start`)
#     host: 127.0.0.1
#     port: 8787
#     path: /gh-webhook
#     secretEnv: THE_LOOP_GH_WEBHOOK_SECRET   # variable holding the webhook HMAC secret
#     allowUnsigned: false

# polling:
#   enabled: false             # run the poller (`the-loop start`)
#   intervalSeconds: 60
#   sources: []                # e.g. [{{provider: github, labels: [the-loop]}}]

# routing:
#   enabled: false             # turn ticket activity into agent sessions
#   defaultHarness: claude     # an installed, tmux-hostable harness adapter (`the-loop plugins`)
#   spawnOnUnmatched: never    # never | always | labeled
#   authorizedUsers: []        # logins allowed to steer work items
#   maxConcurrentDispatches: 4
#   tmux:
#     keepSessionOnClose: true
#     resumeOnRespawn: true

# Plugin sections (integrations.github, channels.slack, ...) take their keys from the installed plugins;
# `the-loop config show` prints each with its defaults.
"""

HEADER = """\
# the-loop configuration, written by `the-loop init {arguments}`.
# Check edits with `the-loop config validate`; `the-loop config show` prints every key in effect.
# Secrets never go in this file: keys ending in `Env` name the environment variable that holds one.
"""


class InitCommand(click.Command):
    """``init`` with the installed plugins' setup options added (``--github`` …), asked of the plugin host only
    when ``init`` itself is parsed or its help is shown."""

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        params = super().get_params(ctx)
        if not hasattr(self, "_setup_params"):
            self._setup_params = [option for spec in _specs(app(ctx)) for option in _options(spec)]
        return [*params[:-1], *self._setup_params, params[-1]]  # --help stays last


def _specs(application: AppContext) -> list[SetupSpec]:
    return [spec for _plugin, spec in application.host.setups()]


def _options(spec: SetupSpec) -> list[click.Option]:
    options = [click.Option([f"--{spec.name}"], metavar=spec.metavar, help=spec.help)]
    for name, metavar, help_text in spec.options:
        if metavar:
            options.append(click.Option([f"--{name}"], metavar=metavar, help=help_text))
        else:
            options.append(click.Option([f"--{name}"], is_flag=True, default=None, help=help_text))
    return options


def _key(option: str) -> str:
    return option.replace("-", "_")


@click.command(cls=InitCommand)
@config_path_option("Where to write")
@click.option("--force", is_flag=True, help="Replace an existing file.")
@click.option(
    "--harness",
    default="claude",
    show_default=True,
    help="The harness sessions run (routing.defaultHarness); checked to be installed and runnable.",
)
@click.option(
    "--poll-interval",
    type=click.IntRange(min=1),
    default=None,
    metavar="SECONDS",
    help="How often the poller asks (polling.intervalSeconds; default 60), when a plugin's part turns it on.",
)
@click.option("--interactive", is_flag=True, help="Ask for each plugin's part, as in a terminal with no option.")
@click.pass_context
def init(
    ctx: click.Context,
    target: Path | None,
    force: bool,
    harness: str,
    poll_interval: int | None,
    interactive: bool,
    **given: Any,
) -> None:
    """Write a new cli-config.yaml: the commented starter, or, with a plugin's option (--github OWNER/REPO …) or
    in a terminal, a config that works at once, checked against each service first.

    Exit 0 when nothing is left to fix; 1 when something is (each finding says how); 2 when it could not run."""
    application = app(ctx)
    path = target_config_path(ctx, target)
    specs = _specs(application)
    chosen = {spec.name: given[_key(spec.name)] for spec in specs if given.get(_key(spec.name))}
    asking = interactive or (not chosen and sys.stdin.isatty() and sys.stdout.isatty())
    if not chosen and asking:
        chosen = _ask(specs)
    if not chosen:
        _write_starter(path, force)
        return
    if poll_interval is not None:
        given["poll_interval"] = poll_interval
    sys.exit(_write_working(application, path, force, harness, specs, chosen, given, asking))


def _ask(specs: list[SetupSpec]) -> dict[str, str]:
    chosen = {}
    for spec in specs:
        if spec.prompt:
            answer = click.prompt(f"{spec.prompt} (empty: skip)", default="", show_default=False).strip()
            if answer:
                chosen[spec.name] = answer
    return chosen


def _write_starter(path: Path, force: bool) -> None:
    from the_loop.config.migrations import CURRENT_CONFIG_VERSION
    from the_loop.state import atomic_write_bytes

    if path.exists() and not force:
        click.echo(f"error: {path} already exists; pass --force to overwrite it", err=True)
        sys.exit(2)
    atomic_write_bytes(path, STARTER.format(version=CURRENT_CONFIG_VERSION).encode("utf-8"), mode=0o644)
    click.echo(f"wrote {path}")


def _write_working(
    application: AppContext,
    path: Path,
    force: bool,
    harness: str,
    specs: list[SetupSpec],
    chosen: Mapping[str, str],
    given: Mapping[str, Any],
    asking: bool,
) -> int:
    """Ask each chosen plugin for its part, write the config they make and say what is left; the exit code."""
    import importlib

    from the_loop.config.migrations import CURRENT_CONFIG_VERSION
    from the_loop.config.models import RoutingSection
    from the_loop.interfaces import SetupRequest

    label = RoutingSection().auto_execute_labels[0]
    confirm = (lambda question: click.confirm(question, default=True)) if asking else (lambda _question: False)
    config: dict[str, Any] = {
        "version": CURRENT_CONFIG_VERSION,
        "routing": {"enabled": True, "defaultHarness": harness, "spawnOnUnmatched": "labeled"},
    }
    results: list[tuple[SetupSpec, SetupResult]] = []
    for spec in (spec for spec in specs if spec.name in chosen):
        options = {
            name: ("yes" if given[_key(name)] is True else str(given[_key(name)]))
            for name, _metavar, _help in spec.options
            if given.get(_key(name)) not in (None, False)
        }
        module, _, attr = spec.run.partition(":")
        result = getattr(importlib.import_module(module), attr)(
            SetupRequest(value=chosen[spec.name], options=options, arming_label=label, confirm=confirm)
        )
        results.append((spec, result))
        config = merged(config, result.config)
    for spec, result in results:
        _show(spec.name, result.notes)
    if given.get("poll_interval") and isinstance(config.get("polling"), dict):
        config["polling"] = {**config["polling"], "intervalSeconds": given["poll_interval"]}
    if not all(result.usable for _spec, result in results):
        click.echo(f"nothing written: {path} would not work until the findings above are fixed")
        return 1
    text = HEADER.format(arguments=" ".join(_arguments(chosen, specs, given, harness))) + _dump(config)
    loaded = _loaded(application, path, text)
    findings = [finding for _spec, result in results for finding in result.findings]
    from the_loop.sessions.harness import harness_findings as findings_of

    harness_findings = findings_of(loaded)
    lines = [line for f in harness_findings for line in (f"[!] {f.problem}", f"     fix: {f.remedy}")]
    _show("harness", lines or [f"[ok] {harness} is installed and runs"])
    findings += harness_findings
    if path.exists() and not force:
        _show_difference(path, text)
        return 1
    from the_loop.state import atomic_write_bytes

    atomic_write_bytes(path, text.encode("utf-8"), mode=0o644)
    click.echo(f"wrote {path}")
    for _spec, result in results:
        for line in result.summary:
            click.echo(f"  {line}")
    click.echo(f"  a session starts on an item labelled {label!r} once an authorized person comments `the-loop start`")
    if findings:
        click.echo(f"left to fix: {len(findings)} finding(s) above; then `the-loop start`")
        return 1
    click.echo(f"next: label an issue {label!r} and comment `the-loop start` on it (after `the-loop start` here)")
    return 0


def merged(base: Mapping[str, Any], part: Mapping[str, Any]) -> dict[str, Any]:
    """``part`` laid over ``base``: mappings merge key by key, lists gain the items they lack, the rest is replaced."""
    out = dict(base)
    for key, value in part.items():
        old = out.get(key)
        if isinstance(old, Mapping) and isinstance(value, Mapping):
            out[key] = merged(old, value)
        elif isinstance(old, list) and isinstance(value, list):
            out[key] = [*old, *(item for item in value if item not in old)]
        else:
            out[key] = value
    return out


def _arguments(chosen: Mapping[str, str], specs: list[SetupSpec], given: Mapping[str, Any], harness: str) -> list[str]:
    words = [f"--{name} {value}" for name, value in chosen.items()]
    for spec in specs:
        for name, metavar, _help in spec.options:
            value = given.get(_key(name))
            if value not in (None, False):
                words.append(f"--{name}" if not metavar else f"--{name} {value}")
    if given.get("poll_interval"):
        words.append(f"--poll-interval {given['poll_interval']}")
    return [*words, *([f"--harness {harness}"] if harness != "claude" else [])]


def _dump(config: Mapping[str, Any]) -> str:
    import yaml

    return yaml.safe_dump(dict(config), sort_keys=False, allow_unicode=True)


def _loaded(application: AppContext, path: Path, text: str) -> LoadedConfig:
    """``text`` loaded as the file at ``path`` would be (a copy beside it, removed after): what init writes loads."""
    from the_loop.config import load_config

    path.parent.mkdir(parents=True, exist_ok=True)
    trial = path.with_name(f".{path.name}.init-{os.getpid()}")
    try:
        trial.write_text(text, encoding="utf-8")
        return load_config(trial, application.host, load_env=False)
    finally:
        trial.unlink(missing_ok=True)


def _show(title: str, lines: list[str]) -> None:
    if lines:
        click.echo(f"{title}:")
        for line in lines:
            click.echo(f"  {line}")


def _show_difference(path: Path, text: str) -> None:
    import difflib

    old = path.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)
    new = text.splitlines(keepends=True)
    click.echo("".join(difflib.unified_diff(old, new, str(path), f"{path} (from init)")), nl=False)
    click.echo(f"not written: {path} exists; the difference above is what init would write (merge it, or --force)")
