"""Local stand-in for EventBridge schedules (moto accepts schedule rules but never fires them).

TEST DOUBLE for EventBridge → Lambda: it reads ``@app.schedule`` registrations (``ScheduledEventConfig``),
computes the next fire time of each ``rate(...)``/``cron(...)`` expression on an injectable clock, and
invokes the handler with the "Scheduled Event" payload EventBridge sends. ``tick(now)`` drives it in tests;
``start()`` runs it in a background thread for ``weknora-ingest up``. A missed period fires once, not once
per missed period. The AWS cron dialect (6 fields, ``?``, ``L``, ``W``, ``#``, day-of-week 1=SUN) is parsed
here: Unix cron libraries use a different field layout and day numbering.
"""

from __future__ import annotations

import calendar
import logging
import re
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

from chalicelib.local.moto_server import ACCOUNT_ID
from chalicelib.local.pollers import Handler, make_context
from chalicelib.observability import log_failure

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]

_RATE = re.compile(r"^rate\(\s*(\d+)\s+(minute|minutes|hour|hours|day|days)\s*\)$")
_CRON = re.compile(r"^cron\((.*)\)$")
_MONTHS = {m.upper(): i for i, m in enumerate(calendar.month_abbr) if m}
_DAYS = {"SUN": 1, "MON": 2, "TUE": 3, "WED": 4, "THU": 5, "FRI": 6, "SAT": 7}


class ScheduleExpressionError(ValueError):
    pass


def utc_now() -> datetime:
    return datetime.now(UTC)


def _utc(dt: datetime) -> datetime:
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)


def _aws_dow(d: date) -> int:
    return (d.weekday() + 1) % 7 + 1  # Monday=0 in Python → 2 in AWS (SUN=1)


def _parse_values(text: str, lo: int, hi: int, names: dict[str, int] | None = None) -> set[int]:
    def num(tok: str) -> int:
        tok = tok.upper()
        if names and tok in names:
            return names[tok]
        if not tok.isdigit():
            raise ScheduleExpressionError(f"bad cron value {tok!r}")
        v = int(tok)
        if not lo <= v <= hi:
            raise ScheduleExpressionError(f"cron value {v} outside {lo}-{hi}")
        return v

    out: set[int] = set()
    for part in text.split(","):
        base, _, step_s = part.partition("/")
        step = int(step_s) if step_s else 1
        if step < 1:
            raise ScheduleExpressionError(f"bad cron step in {part!r}")
        if base == "*":
            start, end = lo, hi
        elif "-" in base:
            a, b = base.split("-", 1)
            start, end = num(a), num(b)
        else:
            start = num(base)
            end = hi if step_s else start
        if start > end:
            raise ScheduleExpressionError(f"bad cron range {part!r}")
        out.update(range(start, end + 1, step))
    return out


@dataclass(frozen=True)
class CronExpression:
    """An EventBridge cron expression: minutes hours day-of-month month day-of-week year (UTC)."""

    text: str
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    months: frozenset[int]
    years: frozenset[int]
    dom: str
    dow: str

    @classmethod
    def parse(cls, fields_text: str) -> CronExpression:
        fields = fields_text.split()
        if len(fields) != 6:
            raise ScheduleExpressionError(f"cron needs 6 fields, got {len(fields)}: {fields_text!r}")
        minute, hour, dom, month, dow, year = fields
        if (dom == "?") == (dow == "?"):
            raise ScheduleExpressionError("exactly one of day-of-month and day-of-week must be '?'")
        expr = cls(
            text=fields_text,
            minutes=tuple(sorted(_parse_values(minute, 0, 59))),
            hours=tuple(sorted(_parse_values(hour, 0, 23))),
            months=frozenset(_parse_values(month, 1, 12, _MONTHS)),
            years=frozenset(_parse_values(year, 1970, 2199)),
            dom=dom.upper(),
            dow=dow.upper(),
        )
        expr._day_matches(date(2024, 1, 31))  # validate the day fields now, not at the first tick
        return expr

    def _day_matches(self, d: date) -> bool:
        last = calendar.monthrange(d.year, d.month)[1]
        if self.dow == "?":
            spec = self.dom
            if spec == "L":
                return d.day == last
            if spec.endswith("W"):
                target = last if spec == "LW" else int(spec[:-1])
                return d == _nearest_weekday(d.year, d.month, min(target, last))
            return d.day in _parse_values(spec, 1, 31)
        spec = self.dow
        if "#" in spec:
            day_s, nth_s = spec.split("#", 1)
            want = _parse_values(day_s, 1, 7, _DAYS)
            return _aws_dow(d) in want and (d.day - 1) // 7 + 1 == int(nth_s)
        if spec.endswith("L"):
            want = _parse_values(spec[:-1] or "7", 1, 7, _DAYS)
            return _aws_dow(d) in want and d.day + 7 > last
        return _aws_dow(d) in _parse_values(spec, 1, 7, _DAYS)

    def next_after(self, after: datetime) -> datetime | None:
        """First matching minute strictly after ``after``; None if the years have run out."""
        after = _utc(after)
        day = after.date()
        limit = max(self.years)
        while day.year <= limit:
            if day.year in self.years and day.month in self.months and self._day_matches(day):
                for h in self.hours:
                    for m in self.minutes:
                        cand = datetime(day.year, day.month, day.day, h, m, tzinfo=UTC)
                        if cand > after:
                            return cand
            day += timedelta(days=1)
        return None


def _nearest_weekday(year: int, month: int, day: int) -> date:
    d = date(year, month, day)
    if d.weekday() == 5:  # Saturday → Friday, unless that leaves the month
        return d - timedelta(days=1) if day > 1 else d + timedelta(days=2)
    if d.weekday() == 6:  # Sunday → Monday, unless that leaves the month
        last = calendar.monthrange(year, month)[1]
        return d + timedelta(days=1) if day < last else d - timedelta(days=2)
    return d


@dataclass(frozen=True)
class RateExpression:
    text: str
    interval: timedelta

    @classmethod
    def parse(cls, text: str) -> RateExpression:
        m = _RATE.match(text.strip())
        if not m:
            raise ScheduleExpressionError(f"bad rate expression {text!r}")
        value, unit = int(m.group(1)), m.group(2)
        if value < 1:
            raise ScheduleExpressionError("rate value must be positive")
        # EventBridge rejects "rate(1 minutes)" and "rate(5 minute)".
        if (value == 1) != (not unit.endswith("s")):
            raise ScheduleExpressionError(f"{text!r}: use the singular unit exactly when the value is 1")
        seconds = {"minute": 60, "hour": 3600, "day": 86400}[unit.rstrip("s")]
        return cls(text=text, interval=timedelta(seconds=value * seconds))

    def next_after(self, after: datetime) -> datetime:
        return _utc(after) + self.interval


def parse_schedule(expression: str) -> CronExpression | RateExpression:
    text = expression.strip()
    if text.startswith("rate("):
        return RateExpression.parse(text)
    m = _CRON.match(text)
    if m:
        return CronExpression.parse(m.group(1))
    raise ScheduleExpressionError(f"unsupported schedule expression {expression!r}")


@dataclass
class ScheduledRule:
    name: str
    function_name: str
    expression: CronExpression | RateExpression
    handler: Handler
    rule_arn: str
    next_fire: datetime | None
    timeout_seconds: float | None = None  # None: the scheduler's default
    memory_mb: int | None = None


@dataclass
class ScheduledInvocation:
    name: str
    scheduled_time: datetime
    event: dict[str, Any]
    result: Any = None
    error: BaseException | None = None


@dataclass
class Scheduler:
    """Fires the app's schedules on ``tick(now)``; ``clock`` gives the start time and drives ``start()``."""

    region: str = "us-east-1"
    clock: Clock = utc_now
    timeout_seconds: float = 60.0
    memory_mb: int = 128
    rules: list[ScheduledRule] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.history: list[ScheduledInvocation] = []

    @classmethod
    def from_app(
        cls,
        app: Any,
        *,
        stage: str = "dev",
        region: str = "us-east-1",
        clock: Clock = utc_now,
        function_settings: Callable[[str], tuple[float, int]] | None = None,
        **kw: Any,
    ) -> Scheduler:
        """One rule per ``@app.schedule``; ``function_settings(name)`` gives (timeout s, memory MB)."""
        from chalice.app import ScheduledEventConfig

        from chalicelib.local.aws_calls import attributed, logical_id

        sched = cls(region=region, clock=clock, **kw)
        for source in app.event_sources:
            if isinstance(source, ScheduledEventConfig):
                expr = source.schedule_expression
                text = expr if isinstance(expr, str) else expr.to_string()
                handler = attributed(logical_id(source.name), app.handler_map[source.name])
                sched.add(source.name, text, handler, f"{app.app_name}-{stage}-{source.name}")
                if function_settings is not None:
                    sched.rules[-1].timeout_seconds, sched.rules[-1].memory_mb = function_settings(
                        source.name
                    )
        return sched

    def add(self, name: str, expression: str, handler: Handler, function_name: str | None = None) -> None:
        parsed = parse_schedule(expression)
        fn = function_name or name
        arn = f"arn:aws:events:{self.region}:{ACCOUNT_ID}:rule/{fn}"
        start = _utc(self.clock())
        self.rules.append(ScheduledRule(name, fn, parsed, handler, arn, parsed.next_after(start)))

    def restart(self, now: datetime | None = None) -> None:
        """Recompute every next fire time as if the rules were created at ``now``."""
        start = _utc(now or self.clock())
        with self._lock:
            for r in self.rules:
                r.next_fire = r.expression.next_after(start)

    def event_for(self, rule: ScheduledRule, when: datetime) -> dict[str, Any]:
        return {
            "version": "0",
            "id": str(uuid.uuid4()),
            "detail-type": "Scheduled Event",
            "source": "aws.events",
            "account": ACCOUNT_ID,
            "time": _utc(when).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "region": self.region,
            "resources": [rule.rule_arn],
            "detail": {},
        }

    def tick(self, now: datetime | None = None) -> list[ScheduledInvocation]:
        """Invoke every rule that is due at ``now`` (default: the clock); returns what ran."""
        now = _utc(now or self.clock())
        due: list[tuple[ScheduledRule, datetime]] = []
        with self._lock:
            for r in self.rules:
                if r.next_fire is not None and r.next_fire <= now:
                    fire_at = r.next_fire
                    nxt = r.expression.next_after(fire_at)
                    while nxt is not None and nxt <= now:  # missed periods collapse into one invocation
                        nxt = r.expression.next_after(nxt)
                    r.next_fire = nxt
                    due.append((r, fire_at))
        done = []
        for rule, fire_at in due:
            inv = ScheduledInvocation(rule.name, fire_at, self.event_for(rule, fire_at))
            ctx = make_context(
                rule.function_name,
                region=self.region,
                timeout_seconds=rule.timeout_seconds or self.timeout_seconds,
                memory_mb=rule.memory_mb or self.memory_mb,
            )
            try:
                inv.result = rule.handler(inv.event, ctx)
            except Exception as exc:  # async invoke: logged; nothing propagates to EventBridge
                log_failure(log, exc, "scheduled %s failed", rule.function_name)
                inv.error = exc
            done.append(inv)
        self.history.extend(done)
        return done

    def start(self, interval_seconds: float = 1.0) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()

        def loop() -> None:
            while not self._stop.wait(interval_seconds):
                try:
                    self.tick()
                except Exception as error:
                    log_failure(log, error, "scheduler tick failed")

        self._thread = threading.Thread(target=loop, name="local-scheduler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
