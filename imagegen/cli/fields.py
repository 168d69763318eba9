"""imagegen's commands receive their settings whole: `settings_options` gives a command an option per field of a
settings dataclass (imagegen_contract.options makes each, as it does the trainer's) and hands it one settings object
of their values. A field's `metadata` holds its option's help and what else the command line needs (flag, metavar,
choices, callback, required; `type`: a click type of its own, such as a folder that must exist)."""

from __future__ import annotations

import functools

from imagegen_contract.options import field_options, option_fields


def settings_options(settings: type, *names: str, into: str):
    """Decorate a command with an option per field of `settings` (those of `names`, in that order; all, without),
    and hand it `settings(...)` of their values as the parameter `into`."""
    chosen = [found.name for found in option_fields(settings, *names)]

    def decorate(command):
        @functools.wraps(command)
        def wrapper(*args, **kwargs):
            values = {name: kwargs.pop(name) for name in chosen}
            return command(*args, **{into: settings(**values)}, **kwargs)

        for option in reversed(field_options(settings, *names)):
            wrapper = option(wrapper)
        return wrapper

    return decorate
