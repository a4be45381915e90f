"""The Telegram channel; its one public name, TelegramChannel, is imported on first use.

Lazy so that importing a submodule (the pure format, split, filter and store modules, or
lazy_aiogram before aiogram itself) does not import aiogram through the channel.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gantry.channel.telegram.channel import TelegramChannel

__all__ = ["TelegramChannel"]


def __getattr__(name: str) -> Any:
    if name == "TelegramChannel":
        from gantry.channel.telegram.channel import TelegramChannel

        return TelegramChannel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
