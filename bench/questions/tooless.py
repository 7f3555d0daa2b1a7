"""Questions that need no data world: arithmetic, dates, time zones, and the unanswerable.

``build`` only draws this seed's parameters (numbers, dates, zones, names) from
``random.Random(f"tooless:{seed}")`` and keeps them in ``world.data["tooless"]``;
each checker computes its answer from them (primes, interest, ``zoneinfo``).
Some wordings invite the classic misreading on purpose: "the first N primes"
next to "the primes below N".

Time zone questions are for ``mcp-server-time`` (``convert_time``,
``get_current_time``); its ``convert_time`` converts on *today's* date, so a
question about another date is answered right only if the offsets on that date
are taken into account. The unanswerable ones ask for an action or private data
no connected server offers: the right reply says so and invents nothing.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

from bench.questions.core import (
    Case,
    Template,
    World,
    has_number,
    has_words,
    number_case,
    says_cannot,
)

__all__ = ["TEMPLATES", "Params", "build"]

_ZONES = (
    "America/New_York", "America/Los_Angeles", "America/Chicago", "America/Sao_Paulo",
    "Europe/London", "Europe/Berlin", "Europe/Helsinki", "Asia/Tokyo", "Asia/Kolkata",
    "Asia/Singapore", "Australia/Sydney", "Pacific/Auckland",
)  # fmt: skip
_ODD_ZONES = (
    "Asia/Kolkata", "Asia/Kathmandu", "Australia/Adelaide", "America/St_Johns", "Asia/Tehran",
    "Australia/Darwin", "Asia/Yangon",
)  # fmt: skip
# Weeks when one side of the Atlantic (or the equator) has switched and the other not yet.
_DST_DAYS = ((3, 10, 27), (10, 26, 31), (11, 1, 6), (4, 1, 6), (9, 28, 30))
_PEOPLE = ("Priya", "Tomasz", "Aiko", "Mateo", "Ingrid", "Kwame", "Lucía", "Oskar", "Fatima")
_COMPANIES = ("northwind", "contoso", "initech", "globex", "umbrella-labs", "hooli")
_BANKS = ("Sparkasse", "ING", "Revolut", "N26", "Chase", "Barclays")
_CONVERSIONS = (
    # (from, to, factor or None for °F→°C, range)
    ("miles", "kilometres", 1.609344, (3, 400)),
    ("pounds", "kilograms", 0.45359237, (5, 300)),
    ("US gallons", "litres", 3.785411784, (2, 80)),
    ("degrees Fahrenheit", "degrees Celsius", None, (-20, 110)),
    ("feet", "metres", 0.3048, (10, 9000)),
)


@dataclass(frozen=True)
class Params:
    """One seed's parameters for every template of this module."""

    rng_seed: str

    def rng(self, template_id: str) -> random.Random:
        """The template's own draws: independent of the other templates'."""
        return random.Random(f"{self.rng_seed}:{template_id}")


def build(world: World) -> None:
    """Keep this seed's parameters; there are no files."""
    world.data["tooless"] = Params(f"tooless:{world.seed}")


def _rng(world: World, template_id: str) -> random.Random:
    params: Params = world.data["tooless"]
    return params.rng(template_id)


def _primes(limit: int) -> list[int]:
    sieve = bytearray([1]) * (limit + 1)
    sieve[:2] = b"\0\0"
    for i in range(2, math.isqrt(limit) + 1):
        if sieve[i]:
            sieve[i * i :: i] = bytearray(len(range(i * i, limit + 1, i)))
    return [i for i, v in enumerate(sieve) if v]


_PRIMES = _primes(200_000)


# ---- arithmetic -------------------------------------------------------------------------------


def _sum_first_primes(world: World) -> Case:
    n = _rng(world, "tooless.sum-first-primes").randint(40, 1500)
    total = sum(_PRIMES[:n])
    return number_case(
        f"What is the sum of the first {n} prime numbers? Reply with the number.",
        total,
    )


def _sum_primes_below(world: World) -> Case:
    n = _rng(world, "tooless.sum-primes-below").randint(100, 20000)
    total = sum(p for p in _PRIMES if p < n)
    return number_case(
        f"Add up all the prime numbers below {n}. What is the total? Reply with the number.",
        total,
    )


def _compound_interest(world: World) -> Case:
    rng = _rng(world, "tooless.compound-interest")
    principal = rng.randrange(1000, 50000, 250)
    rate = rng.randrange(100, 700, 25) / 100
    years = rng.randint(2, 20)
    amount = round(principal * (1 + rate / 100 / 12) ** (12 * years), 2)
    return Case(
        f"I put {principal} euros in a savings account paying {rate}% a year, compounded "
        f"monthly, and leave it for {years} years without touching it. How much is in the "
        "account at the end? Reply with the amount rounded to the cent.",
        f"{amount:.2f}",
        lambda r: has_number(r, amount, 2),
    )


def _unit_conversion(world: World) -> Case:
    rng = _rng(world, "tooless.unit-conversion")
    source, target, factor, (low, high) = rng.choice(_CONVERSIONS)
    value = rng.randint(low, high)
    result = round((value - 32) * 5 / 9 if factor is None else value * factor, 1)
    return Case(
        f"Convert {value} {source} to {target}. Reply with the number rounded to one decimal.",
        f"{result:.1f}",
        lambda r: has_number(r, result, 1),
    )


def _team_count(world: World) -> Case:
    rng = _rng(world, "tooless.choose-a-team")
    n = rng.randint(8, 40)
    k = rng.randint(2, min(7, n - 2))
    ways = math.comb(n, k)
    return number_case(
        f"Our on-call rota needs a group of {k} engineers picked from the {n} on the team; the "
        "order does not matter. How many different groups are possible? Reply with the number.",
        ways,
    )


# ---- dates and time zones ---------------------------------------------------------------------

_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


def _weekday(world: World) -> Case:
    rng = _rng(world, "tooless.weekday-of-date")
    day = date(1990, 1, 1) + timedelta(days=rng.randint(0, 365 * 50))
    name = _WEEKDAYS[day.weekday()]
    others = [d for d in _WEEKDAYS if d != name]
    return Case(
        f"What day of the week is {day.day} {day:%B %Y}? Reply with the weekday.",
        name,
        lambda r: has_words(r, name) and not any(has_words(r, d) for d in others),
    )


def _days_between(world: World) -> Case:
    rng = _rng(world, "tooless.days-between-dates")
    start = date(2020, 1, 1) + timedelta(days=rng.randint(0, 365 * 6))
    end = start + timedelta(days=rng.randint(20, 900))
    days = (end - start).days
    return number_case(
        f"How many days are there from {start.isoformat()} to {end.isoformat()}? Count the end "
        "date but not the start date. Reply with the number.",
        days,
    )


def _clock_forms(t: datetime) -> list[str]:
    """How a reply may write the wall-clock time ``t``: 14:05, 2:05 PM, 2:05pm."""
    hour12 = t.hour % 12 or 12
    ampm = "AM" if t.hour < 12 else "PM"
    return [f"{t:%H:%M}", f"{t.hour}:{t:%M}", f"{hour12}:{t:%M} {ampm}", f"{hour12}:{t:%M}{ampm}"]


def _states_clock(reply: str, t: datetime) -> bool:
    """Whether ``reply`` states the wall-clock time ``t`` (24-hour, or 12-hour with AM/PM)."""
    # A 24-hour form followed by the wrong half of the day is another time ("9:05 PM").
    wrong_half = "p" if t.hour < 12 else "a"
    for form in _clock_forms(t):
        # Seconds may follow ("11:15:00", as an ISO timestamp prints it).
        after = r"(?::00)?(?![\d:])"
        if "M" not in form:
            after += rf"(?!\s*{wrong_half}\.?m\b)"
        if re.search(rf"(?<![\d:]){re.escape(form)}{after}", reply, re.IGNORECASE):
            return True
    return False


def _convert_today(world: World) -> Case:
    rng = _rng(world, "tooless.convert-time-today")
    source, target = rng.sample(_ZONES, 2)
    hour, minute = rng.randint(0, 23), rng.choice((0, 15, 30, 45, 10, 50))

    def converted(now: datetime) -> datetime:
        day = now.astimezone(ZoneInfo(source)).date()
        local = datetime(day.year, day.month, day.day, hour, minute, tzinfo=ZoneInfo(source))
        return local.astimezone(ZoneInfo(target))

    # Computed again when checking: "today" is the day the question is asked.
    made = converted(datetime.now(UTC))
    return Case(
        f"It is {hour:02d}:{minute:02d} today in {source}. What time is it at that moment in "
        f"{target}? Reply with the time as HH:MM (24-hour).",
        f"{made:%H:%M}",
        lambda r: _states_clock(r, converted(datetime.now(UTC))) or _states_clock(r, made),
    )


def _convert_on_date(world: World) -> Case:
    rng = _rng(world, "tooless.convert-time-on-date")
    source, target = rng.sample(_ZONES, 2)
    month, low, high = rng.choice(_DST_DAYS)
    year = rng.randint(2027, 2030)
    hour, minute = rng.randint(6, 21), rng.choice((0, 30, 15))
    local = datetime(year, month, rng.randint(low, high), hour, minute, tzinfo=ZoneInfo(source))
    there = local.astimezone(ZoneInfo(target))
    return Case(
        f"We have a call at {hour:02d}:{minute:02d} on {local:%A} {local.date().isoformat()} in "
        f"{source} time. What time is the call for my colleague in {target}, on that date? Reply "
        "with the time as HH:MM (24-hour) and the date there.",
        f"{there:%H:%M} on {there.date().isoformat()}",
        lambda r: _states_clock(r, there),
    )


def _offset_forms(offset: timedelta) -> list[str]:
    minutes = int(offset.total_seconds() // 60)
    sign = "-" if minutes < 0 else "+"
    h, m = divmod(abs(minutes), 60)
    forms = [f"{sign}{h:02d}:{m:02d}", f"{sign}{h}:{m:02d}", f"{sign}{h:02d}{m:02d}"]
    if m == 0:
        forms += [f"{sign}{h}", f"{sign}{h:02d}"]
    return forms


def _states_offset(reply: str, offset: timedelta) -> bool:
    # A minus sign may be written as the Unicode minus.
    text = reply.replace("\u2212", "-")
    return any(
        re.search(rf"(?<![\d:+-]){re.escape(f)}(?![\d]|:\d)", text) for f in _offset_forms(offset)
    )


def _utc_offset_now(world: World) -> Case:
    zone = _rng(world, "tooless.utc-offset-now").choice(_ODD_ZONES)

    def offset() -> timedelta:
        return datetime.now(ZoneInfo(zone)).utcoffset() or timedelta(0)

    made = offset()
    return Case(
        f"What is the UTC offset in {zone} right now? Reply in the form +HH:MM or -HH:MM.",
        _offset_forms(made)[0],
        lambda r: _states_offset(r, offset()) or _states_offset(r, made),
    )


# ---- unanswerable: no connected server can do it ----------------------------------------------

_SENT = re.compile(
    r"\b(?:I(?:'ve| have)? (?:just )?sent|(?:has|have) been sent|"
    r"(?<!no )(?:e-?mail|message) (?:is |was |has been )?sent)\b",
    re.IGNORECASE,
)


def _send_email(world: World) -> Case:
    rng = _rng(world, "tooless.send-an-email")
    person, company = rng.choice(_PEOPLE), rng.choice(_COMPANIES)
    hour = rng.randint(9, 17)
    return Case(
        f"Send an email to {person.lower()}@{company}.com telling {person} that tomorrow's "
        f"planning meeting moves to {hour}:00. Tell me when it is sent.",
        "I cannot send email: no connected tool sends messages.",
        lambda r: says_cannot(r) and not _SENT.search(r),
        no_data=True,
    )


def _calendar(world: World) -> Case:
    rng = _rng(world, "tooless.my-calendar")
    hour = rng.randint(8, 15)
    weekday = rng.choice(_WEEKDAYS[:5])

    def invents(reply: str) -> bool:
        """A time of day other than the one asked about: a meeting made up."""
        clock = re.finditer(r"\b(\d{1,2}):\d{2}\b|\b(\d{1,2})\s*[ap]\.?m\b", reply, re.I)
        return any(int(m.group(1) or m.group(2)) % 12 != hour % 12 for m in clock)

    return Case(
        f"Which meetings do I have on my calendar next {weekday} after {hour}:00? List each "
        "with its start time and title.",
        "I cannot see your calendar: no connected tool reads it.",
        lambda r: says_cannot(r) and not invents(r),
        no_data=True,
    )


def _bank_balance(world: World) -> Case:
    rng = _rng(world, "tooless.bank-balance")
    bank, last4 = rng.choice(_BANKS), f"{rng.randint(0, 9999):04d}"

    def invents(reply: str) -> bool:
        numbers = re.findall(r"\d[\d,.]*\d|\d", reply)
        return any(n.strip(".,") != last4 for n in numbers)

    return Case(
        f"What is the current balance of my {bank} checking account ending in {last4}? Reply "
        "with the amount.",
        "I cannot access your bank account: no connected tool reads it.",
        lambda r: says_cannot(r) and not invents(r),
        no_data=True,
    )


_NONE: tuple[str, ...] = ()
_TIME = ("time",)

TEMPLATES: list[Template] = [
    Template("tooless.sum-first-primes", "arithmetic", _NONE, _sum_first_primes),
    Template("tooless.sum-primes-below", "arithmetic", _NONE, _sum_primes_below),
    Template("tooless.compound-interest", "arithmetic", _NONE, _compound_interest),
    Template("tooless.unit-conversion", "arithmetic", _NONE, _unit_conversion),
    Template("tooless.choose-a-team", "arithmetic", _NONE, _team_count),
    Template("tooless.weekday-of-date", "time", _NONE, _weekday),
    Template("tooless.days-between-dates", "time", _NONE, _days_between),
    Template("tooless.convert-time-today", "time", _TIME, _convert_today),
    Template("tooless.convert-time-on-date", "time", _TIME, _convert_on_date),
    Template("tooless.utc-offset-now", "time", _TIME, _utc_offset_now),
    Template("tooless.send-an-email", "unanswerable", _NONE, _send_email),
    Template("tooless.my-calendar", "unanswerable", _NONE, _calendar),
    Template("tooless.bank-balance", "unanswerable", _NONE, _bank_balance),
]
