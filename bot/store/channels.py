"""A channel's own settings: the language its messages are written in, and the
currency a price typed there without one is read in."""
from __future__ import annotations

import time

from bot.store.base import Base, Row


class Channels(Base):
    def channel_settings(self, channel: str) -> Row | None:
        rows = self.rows("select * from channel_settings where channel = ?", [channel])
        return rows[0] if rows else None

    def channel_lang(self, channel: str | None) -> str | None:
        """The language the channel chose (None: the bot's default)."""
        return (self.channel_settings(channel) or {}).get("lang") if channel else None

    def set_channel_lang(self, channel: str, lang: str | None, user: str) -> Row | None:
        """Set (None: clear) the channel's language; the settings it replaced."""
        old = self.channel_settings(channel)
        with self.tx():
            self.db.execute("insert into channel_settings (channel, lang, set_by, set_at) "
                            "values (?, ?, ?, ?) on conflict (channel) do update set "
                            "lang = excluded.lang, set_by = excluded.set_by, "
                            "set_at = excluded.set_at", [channel, lang, user, time.time()])
        return old

    def channel_currency(self, channel: str | None) -> str | None:
        """The currency the channel chose (None: none; a price then keeps none)."""
        return (self.channel_settings(channel) or {}).get("currency") if channel else None

    def set_channel_currency(self, channel: str, currency: str | None, user: str) -> None:
        """Set (None: clear) the currency a price without one is read in."""
        with self.tx():
            self.db.execute("insert into channel_settings (channel, currency, set_by, set_at) "
                            "values (?, ?, ?, ?) on conflict (channel) do update set "
                            "currency = excluded.currency, set_by = excluded.set_by, "
                            "set_at = excluded.set_at", [channel, currency, user, time.time()])
