"""`/plan digest ...`: the weekly digest's schedule (a weekday, a 24-hour time
and an IANA timezone), `now` and `off`. Pure."""
from __future__ import annotations

import re
import zoneinfo

from bot.plans.grammar import PlanCommand, PlanError, no_more
from bot.states import Json
from worker.i18n import N_, _, close, did_you_mean, sentences

WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


DIGEST_USAGE = N_("`/plan digest weekly mon 09:00 Asia/Seoul` (any weekday, a 24-hour time and "
                  "an IANA timezone), `/plan digest now`, `/plan digest off`, or `/plan digest` "
                  "to see the schedule")


def parse_digest(words: list[str]) -> PlanCommand:
    """`digest` (show), `digest now`, `digest off`, `digest weekly DAY HH:MM TZ`."""
    if not words:
        return PlanCommand("digest")
    if words[0] in ("now", "off"):
        no_more(words[1:], f"/plan digest {words[0]}")
        return PlanCommand("digest-" + words[0])
    if words[0] != "weekly":
        raise PlanError(sentences(
            _("`{word}`: the digest takes weekly, now or off.", word=words[0]),
            did_you_mean(words[0], ("weekly", "now", "off"), "/plan digest "), _(DIGEST_USAGE)))
    if len(words) != 4:
        raise PlanError(_("A weekly digest needs a weekday, a time and a timezone, e.g. "
                          "`/plan digest weekly mon 09:00 Asia/Seoul`"))
    day, at, tz = words[1:]
    return PlanCommand("digest-weekly", args={"weekday": weekday(day), **time_of_day(at),
                                              "tz": timezone(tz)})


def weekday(raw: str) -> str:
    word = raw.lower()
    day = next((d for d in WEEKDAYS if word == d or (len(word) >= 3 and
                any(full.startswith(word) for full in _FULL_DAYS[d]))), None)
    if day is None:
        raise PlanError(_("`{word}` is not a weekday: write mon, tue, wed, thu, fri, sat or sun "
                          "(e.g. `/plan digest weekly mon 09:00 Asia/Seoul`)", word=raw))
    return day


_FULL_DAYS = {"mon": ("monday",), "tue": ("tuesday", "tues"), "wed": ("wednesday",),
              "thu": ("thursday", "thurs"), "fri": ("friday",), "sat": ("saturday",),
              "sun": ("sunday",)}


def time_of_day(raw: str) -> Json:
    m = re.fullmatch(r"(\d{1,2}):(\d{2})", raw)
    if not m:
        raise PlanError(_("`{word}` is not a time of day: write 24-hour HH:MM, e.g. 09:00 or "
                          "17:30", word=raw))
    hour, minute = int(m.group(1)), int(m.group(2))
    if hour > 23:
        raise PlanError(_("`{word}`: hours go from 00 to 23 (midnight is 00:00), e.g. 09:00",
                          word=raw))
    if minute > 59:
        raise PlanError(_("`{word}`: minutes go from 00 to 59, e.g. 09:30", word=raw))
    return {"hour": hour, "minute": minute}


def timezone(raw: str) -> str:
    """An IANA name (Asia/Seoul, Europe/Berlin, UTC), checked against the tz database."""
    try:
        if not re.fullmatch(r"[A-Za-z0-9_+\-/]{1,60}", raw) or ".." in raw:
            raise ValueError(raw)
        zoneinfo.ZoneInfo(raw)
        return raw
    except (ValueError, zoneinfo.ZoneInfoNotFoundError, OSError):
        pass
    names = {n.lower(): n for n in zoneinfo.available_timezones()}
    if raw.lower() in names:
        return names[raw.lower()]  # asia/seoul is Asia/Seoul
    zone = close(raw, names.values())
    if zone:
        raise PlanError(_("`{word}` is not an IANA timezone: did you mean {zone}? write "
                          "Area/City as in the tz database, e.g. Asia/Seoul, Europe/Berlin, "
                          "America/New_York, or UTC", word=raw, zone=zone))
    raise PlanError(_("`{word}` is not an IANA timezone: write Area/City as in the tz database, "
                      "e.g. Asia/Seoul, Europe/Berlin, America/New_York, or UTC", word=raw))
