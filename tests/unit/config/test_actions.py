"""``<Actions>``: what a valid section becomes, and every refusal naming its element."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spool.server.config import (
    ActionParameter,
    ArchiveJournals,
    CompressJournals,
    DiskThreshold,
    DowngradeReplication,
    ExecuteEvent,
    IfCondition,
    IfDiskUsage,
    JournalLimits,
    OnAdmin,
    OnDiskUsage,
    OnExecute,
    OnSchedule,
    OnShutdown,
    OnStartup,
    PublishMessage,
    RemoveJournals,
    Schedule,
    SetTransport,
    Shutdown,
    Template,
    TruncateStatistics,
    UpgradeReplication,
)
from spool.server.config.schedule import ScheduleError, parse_every
from spool.server.config.template import TemplateError
from tests.unit.config.helpers import BASE, assert_refused, doc, parse

TXLOG = "<TransactionLog><Topic><Name>.*</Name></Topic></TransactionLog>"


def action(*parts: str, name: str = "a") -> str:
    """An <Actions> with one action whose parts follow its Name on one line each; the
    Action element is on line 4 of the document, its Name on line 5."""
    return "\n".join(["<Actions>", "<Action>", f"<Name>{name}</Name>", *parts, "</Action>",
                      "</Actions>"])  # fmt: skip


def on(module: str, options: str = "") -> str:
    inner = f"<Options>{options}</Options>" if options else ""
    return f"<On><Module>{module}</Module>{inner}</On>"


def do(module: str, options: str = "", tag: str = "Do") -> str:
    inner = f"<Options>{options}</Options>" if options else ""
    return f"<{tag}><Module>{module}</Module>{inner}</{tag}>"


ADMIN = on("amps-action-on-admin")
REDRIVE = "spool-action-do-redrive-dead-letters"
#: two queues on one line, one with a dead-letter topic
QUEUES = (
    "<SOW><Queue><Name>work</Name><DeadLetter><Topic>work-dead</Topic></DeadLetter></Queue>"
    "<Queue><Name>plain</Name></Queue></SOW>"
)
ARCHIVE = do("amps-action-do-archive-journal", "<Age>1d</Age>")


def test_every_trigger_condition_and_module_is_read_into_its_model() -> None:
    body = TXLOG + "\n" + action(
        on("amps-action-on-schedule", "<Every>Weekly Sun 03:00</Every><TimeZone>Europe/Paris</TimeZone>"),
        on("amps-action-on-schedule", "<Every>90m</Every>"),
        on("amps-action-on-startup"),
        on("amps-action-on-shutdown"),
        on("amps-action-on-admin", "<Parameter><Name>topic</Name><Default>ops</Default>"
           "<Pattern>[a-z/]+</Pattern><Description>where</Description></Parameter>"
           "<Parameter><Name>note</Name></Parameter>"),
        on("amps-action-on-disk-usage", "<Path>journal</Path><Above>85%</Above>"
           "<Interval>30s</Interval><Repeat>10m</Repeat>"),
        do("amps-action-if-condition", "<Condition>/txlog/bytes &gt; 1e9</Condition>", "If"),
        do("amps-action-if-disk-usage", "<Path>/mnt/cold</Path><FreeBelow>10GB</FreeBelow>", "If"),
        do("amps-action-do-archive-journal", "<Age>1d</Age><Count>10</Count>"),
        do("amps-action-do-compress-journal", "<Size>5GB</Size><Method>gzip</Method>"),
        do("amps-action-do-remove-journal", "<Age>30d</Age>"),
        do("amps-action-do-truncate-statistics", "<Age>14d</Age>"),
        do("amps-action-do-disable-transport", "<Transport>websocket-json</Transport>"),
        do("amps-action-do-enable-transport", "<Transport>websocket-json</Transport>"),
        do("amps-action-do-publish-message", "<Topic>{{topic}}</Topic>"
           '<Data>{"n":"{{AMPS_JOURNALS_REMOVED}}","by":"{{AMPS_USER}}"}</Data>'
           "<MessageType>json</MessageType>"),
        do("amps-action-do-execute-event", "<Event>cleaned</Event>"),
        do("amps-action-do-shutdown"),
    ).replace("</Actions>", "") + "\n" + action(
        on("amps-action-on-execute", "<Event>cleaned</Event>"),
        do("amps-action-do-publish-message", '<Topic>x</Topic><Data>{"v":"{{ANYTHING}}"}</Data>'),
        name="b",
    ).replace("<Actions>", "")  # fmt: skip
    config = parse(doc(body))
    first, second = config.actions
    assert first.name == "a" and first.where == "/SpoolConfig/Actions/Action[1]"
    assert first.triggers == (
        OnSchedule(Schedule("weekly", time_of_day=10800, weekday=6, zone="Europe/Paris",
                            text="Weekly Sun 03:00"), where="/SpoolConfig/Actions/Action[1]/On[1]"),
        OnSchedule(Schedule("every", interval=5400.0, text="90m"),
                   where="/SpoolConfig/Actions/Action[1]/On[2]"),
        OnStartup(where="/SpoolConfig/Actions/Action[1]/On[3]"),
        OnShutdown(where="/SpoolConfig/Actions/Action[1]/On[4]"),
        OnAdmin((ActionParameter("topic", "ops", "[a-z/]+", "where"), ActionParameter("note")),
                where="/SpoolConfig/Actions/Action[1]/On[5]"),
        OnDiskUsage("journal", None, 85.0, 30.0, 600.0, where="/SpoolConfig/Actions/Action[1]/On[6]"),
    )  # fmt: skip
    steps = [(type(s), s.where.rsplit("/", 1)[1]) for s in first.steps]
    assert steps == [
        (IfCondition, "If[1]"), (IfDiskUsage, "If[2]"), (ArchiveJournals, "Do[1]"),
        (CompressJournals, "Do[2]"), (RemoveJournals, "Do[3]"), (TruncateStatistics, "Do[4]"),
        (SetTransport, "Do[5]"), (SetTransport, "Do[6]"), (PublishMessage, "Do[7]"),
        (ExecuteEvent, "Do[8]"), (Shutdown, "Do[9]"),
    ]  # fmt: skip
    condition, disk, archive, compress, remove, truncate, off, on_, publish, event, _ = first.steps
    assert isinstance(condition, IfCondition) and condition.expression.text == "/txlog/bytes > 1e9"
    assert isinstance(disk, IfDiskUsage) and disk.path == Path("/mnt/cold")
    assert disk.threshold == DiskThreshold("free_below", 10 * 1024**3)
    assert isinstance(archive, ArchiveJournals) and archive.limits == JournalLimits(86400.0, 10)
    assert isinstance(compress, CompressJournals)
    assert (compress.limits, compress.method) == (JournalLimits(size=5 * 1024**3), "gzip")
    assert isinstance(remove, RemoveJournals) and remove.limits == JournalLimits(age=30 * 86400.0)
    assert isinstance(truncate, TruncateStatistics) and truncate.age == 14 * 86400.0
    assert isinstance(off, SetTransport) and (off.enabled, off.module) == (
        False, "amps-action-do-disable-transport",
    )  # fmt: skip
    assert isinstance(on_, SetTransport) and on_.enabled
    assert isinstance(publish, PublishMessage)
    assert publish.topic.variables == ("topic",)
    assert publish.data.variables == ("AMPS_JOURNALS_REMOVED", "AMPS_USER")
    assert isinstance(event, ExecuteEvent) and event.event == "cleaned"
    # an action raised by an event inherits the raiser's variables: not checked
    assert second.triggers == (OnExecute("cleaned", where="/SpoolConfig/Actions/Action[2]/On"),)


def test_a_disk_label_follows_the_data_directory() -> None:
    config = parse(doc(TXLOG + "\n" + action(
        on("amps-action-on-disk-usage", "<Path>archive</Path><Above>90</Above>"), ARCHIVE)))  # fmt: skip
    trigger = config.actions[0].triggers[0]
    assert isinstance(trigger, OnDiskUsage) and trigger.path is None
    assert config.directory(trigger.label) == BASE / "data" / "archive"


A = "/SpoolConfig/Actions/Action"


def _destination(name: str, sync: str) -> str:
    return (
        f"<Destination><Name>{name}</Name><SyncType>{sync}</SyncType>"
        "<Topic><Name>.*</Name></Topic><Transport><Type>amps-replication</Type>"
        "<InetAddr>127.0.0.1:9107</InetAddr></Transport></Destination>"
    )


#: two destinations, b sync and c async (on the TransactionLog's line)
REPLICATION = f"<Replication>{_destination('b', 'sync')}{_destination('c', 'async')}</Replication>"

# (id, body, path, line, fragment): the Action starts on line 4 (with TXLOG on line 3)
REFUSED: list[tuple[str, str, str, int, str]] = [
    ("no Name", TXLOG + "\n<Actions>\n<Action>\n" + ADMIN + "</Action></Actions>", A, 5,
     "<Action> needs a <Name>"),
    ("no On", TXLOG + "\n" + action(ARCHIVE), A, 5, "<Action> needs an <On>"),
    ("no Do", TXLOG + "\n" + action(ADMIN), A, 5, "action 'a' needs at least one <Do>"),
    ("unknown module", TXLOG + "\n" + action(ADMIN, do("amps-action-do-archive-journals", "<Age>1d</Age>")),
     f"{A}/Do/Module", 8, "unknown module 'amps-action-do-archive-journals' in <Do> (known: "),
    ("a trigger not built yet", TXLOG + "\n" + action(on("amps-action-on-deliver-message"), ARCHIVE),
     f"{A}/On/Module", 7, "amps-action-on-deliver-message is not supported yet: message-driven "
     "triggers are not part of this version of Spool; remove this module"),
    ("a module not built yet", TXLOG + "\n" + action(ADMIN, do("amps-action-do-query-sow")),
     f"{A}/Do/Module", 8, "amps-action-do-query-sow is not supported yet"),
    ("did you mean", TXLOG + "\n" + action(ADMIN, do("amps-action-do-archive-jornal")),
     f"{A}/Do/Module", 8, "did you mean amps-action-do-archive-journal?"),
    ("not an AMPS name", TXLOG + "\n" + action(ADMIN, do("archive")),
     f"{A}/Do/Module", 8, "module names start with amps-action-"),
    ("a trigger in Do", TXLOG + "\n" + action(ADMIN, do("amps-action-on-startup")),
     f"{A}/Do/Module", 8, "amps-action-on-startup is a trigger: it belongs in <On>, not in <Do>"),
    ("a module in On", TXLOG + "\n" + action(on("amps-action-do-shutdown"), ARCHIVE),
     f"{A}/On/Module", 7, "amps-action-do-shutdown is a module: it belongs in <Do>, not in <On>"),
    ("downgrade without replication", TXLOG + "\n" + action(ADMIN, do("amps-action-do-downgrade-replication", "<Age>300s</Age>")),
     f"{A}/Do", 8, "amps-action-do-downgrade-replication changes the sync type of sync replication "
     "destinations, and no <Replication> <Destination> is configured; remove this module"),
    ("upgrade with only async", TXLOG + REPLICATION.replace(">sync<", ">async<") + "\n" + action(ADMIN, do("amps-action-do-upgrade-replication", "<Age>10s</Age>")),
     f"{A}/Do", 8, "no <Destination> has <SyncType>sync</SyncType>; remove this module"),
    ("replication without Age", TXLOG + REPLICATION + "\n" + action(ADMIN, do("amps-action-do-upgrade-replication")),
     f"{A}/Do", 8, "amps-action-do-upgrade-replication needs the option <Age> (seconds behind under which"),
    ("unknown destination", TXLOG + REPLICATION + "\n" + action(ADMIN, do("amps-action-do-downgrade-replication", "<Age>5m</Age><Destination>z</Destination>")),
     f"{A}/Do/Options/Destination", 8, "no replication destination named 'z' (configured: b, c)"),
    ("async destination", TXLOG + REPLICATION + "\n" + action(ADMIN, do("amps-action-do-downgrade-replication", "<Age>5m</Age><Destination>c</Destination>")),
     f"{A}/Do/Options/Destination", 8, "destination 'c' is configured async"),
    ("destination twice", TXLOG + REPLICATION + "\n" + action(ADMIN, do("amps-action-do-downgrade-replication", "<Age>5m</Age><Destination>b</Destination><Destination>b</Destination>")),
     f"{A}/Do/Options/Destination[2]", 8, "destination 'b' is named twice"),
    ("proxied transfer without replicated queues", TXLOG + "\n" + action(ADMIN, do("amps-action-do-enable-proxied-transfer")),
     f"{A}/Do", 8, "switches proxied transfer of replicated queues, and this instance has none"),
    ("redrive of a queue without dead letters", TXLOG + QUEUES + "\n" + action(ADMIN, do(REDRIVE, "<Queue>plain</Queue>")),
     f"{A}/Do/Options/Queue", 8, "queue 'plain' has no <DeadLetter>; queues with dead letters: work"),
    ("redrive of no queue", TXLOG + QUEUES + "\n" + action(ADMIN, do(REDRIVE, "<Queue>nope</Queue>")),
     f"{A}/Do/Options/Queue", 8, "queue 'nope' is not a configured queue"),
    ("redrive filter", TXLOG + QUEUES + "\n" + action(ADMIN, do(REDRIVE, "<Queue>work</Queue><Filter>/a ==</Filter>")),
     f"{A}/Do/Options/Filter", 8, "the Filter does not compile"),
    ("redrive limit", TXLOG + QUEUES + "\n" + action(ADMIN, do(REDRIVE, "<Queue>work</Queue><Limit>10001</Limit>")),
     f"{A}/Do/Options/Limit", 8, "Limit must be between 1 and 10000"),
    ("redrive target", TXLOG + QUEUES + "\n" + action(ADMIN, do(REDRIVE, "<Queue>work</Queue><Target>^w</Target>")),
     f"{A}/Do/Options/Target", 8, "the Target is one topic, not a regular expression"),
    ("no Module", TXLOG + "\n" + action(ADMIN, "<Do><Options/></Do>"), f"{A}/Do", 8,
     "<Do> needs a <Module>"),
    ("unknown option", TXLOG + "\n" + action(ADMIN, do("amps-action-do-archive-journal", "<Age>1d</Age><Days>3</Days>")),
     f"{A}/Do/Options/Days", 8, "unknown element <Days> in <Options> (allowed: Age, Count, Size)"),
    ("missing option", TXLOG + "\n" + action(ADMIN, do("amps-action-do-truncate-statistics")),
     f"{A}/Do", 8, "amps-action-do-truncate-statistics needs the option <Age>"),
    ("no limit", TXLOG + "\n" + action(ADMIN, do("amps-action-do-remove-journal", "<Method>x</Method>")),
     f"{A}/Do/Options/Method", 8, "unknown element <Method>"),
    ("options for none", TXLOG + "\n" + action(ADMIN, do("amps-action-do-shutdown", "<Now>yes</Now>")),
     f"{A}/Do/Options", 8, "amps-action-do-shutdown takes no options; remove <Options>"),
    ("journal without a log", action(ADMIN, ARCHIVE).replace("\n", "\n", 1), f"{A}/Do", 7,
     "amps-action-do-archive-journal acts on the transaction log's journals: configure a <TransactionLog>"),
    ("bad schedule", TXLOG + "\n" + action(on("amps-action-on-schedule", "<Every>Daily 25:00</Every>"), ARCHIVE),
     f"{A}/On/Options/Every", 7, "bad schedule: '25:00' in 'Daily 25:00' is not a time of day"),
    ("no schedule", TXLOG + "\n" + action(on("amps-action-on-schedule"), ARCHIVE), f"{A}/On", 7,
     "amps-action-on-schedule needs the option <Every>"),
    ("bad zone", TXLOG + "\n" + action(on("amps-action-on-schedule", "<Every>02:00</Every><TimeZone>Mars/Olympus</TimeZone>"), ARCHIVE),
     f"{A}/On/Options/TimeZone", 7, "unknown time zone 'Mars/Olympus'"),
    ("Z and a zone", TXLOG + "\n" + action(on("amps-action-on-schedule", "<Every>02:00Z</Every><TimeZone>Asia/Tokyo</TimeZone>"), ARCHIVE),
     f"{A}/On/Options/Every", 7, "says UTC (Z) but TimeZone is Asia/Tokyo"),
    ("two on-admin", TXLOG + "\n" + action(ADMIN, ADMIN, ARCHIVE), f"{A}/On[2]", 8,
     "amps-action-on-admin appears twice in this action (first at line 7)"),
    ("unknown variable", TXLOG + "\n" + action(ADMIN, do("amps-action-do-publish-message", "<Topic>t</Topic><Data>{\"x\":\"{{AMPS_JOURNALS_REMOVED}}\"}</Data>")),
     f"{A}/Do/Options/Data", 8, "unknown variable {{AMPS_JOURNALS_REMOVED}}: nothing defines it at this point"),
    ("variable of a later module", TXLOG + "\n" + action(ADMIN, do("amps-action-do-publish-message", "<Topic>t</Topic><Data>{\"x\":\"{{AMPS_JOURNALS_REMOVED}}\"}</Data>"), do("amps-action-do-remove-journal", "<Age>1d</Age>")),
     f"{A}/Do[1]/Options/Data", 8, "unknown variable {{AMPS_JOURNALS_REMOVED}}"),
    ("malformed reference", TXLOG + "\n" + action(ADMIN, do("amps-action-do-publish-message", "<Topic>{{ 1x }}</Topic><Data>{}</Data>")),
     f"{A}/Do/Options/Topic", 8, "'{{ 1x }}' is not a variable reference"),
    ("a regex topic", TXLOG + "\n" + action(ADMIN, do("amps-action-do-publish-message", "<Topic>orders.*</Topic><Data>{}</Data>")),
     f"{A}/Do/Options/Topic", 8, "'orders.*' cannot be published to"),
    ("Data not JSON", TXLOG + "\n" + action(ADMIN, do("amps-action-do-publish-message", "<Topic>t</Topic><Data>{oops}</Data>")),
     f"{A}/Do/Options/Data", 8, "the Data is not JSON"),
    ("bad condition", TXLOG + "\n" + action(ADMIN, do("amps-action-if-condition", "<Condition>/a &gt;&gt; 1</Condition>", "If"), ARCHIVE),
     f"{A}/If/Options/Condition", 8, "bad condition:"),
    ("unknown transport", TXLOG + "\n" + action(ADMIN, do("amps-action-do-enable-transport", "<Transport>tcp</Transport>")),
     f"{A}/Do/Options/Transport", 8, "no transport named 'tcp' (configured: websocket-json)"),
    ("disk path", TXLOG + "\n" + action(on("amps-action-on-disk-usage", "<Path>cold</Path><Above>80%</Above>"), ARCHIVE),
     f"{A}/On/Options/Path", 7, "'cold' is neither a directory of the instance (data, stats, journal, archive) nor a path"),
    ("percent", TXLOG + "\n" + action(on("amps-action-on-disk-usage", "<Path>data</Path><Above>100%</Above>"), ARCHIVE),
     f"{A}/On/Options/Above", 7, "'100%' is not a percentage between 0 and 100"),
    ("two thresholds", TXLOG + "\n" + action(ADMIN, do("amps-action-if-disk-usage", "<Path>data</Path><Above>1</Above><Below>2</Below>", "If"), ARCHIVE),
     f"{A}/If/Options", 8, "needs exactly one of <Above>, <Below> (used percent) or <FreeBelow> (a size); got Above, Below"),
    ("parameter name", TXLOG + "\n" + action(on("amps-action-on-admin", "<Parameter><Name>AMPS_X</Name></Parameter>"), ARCHIVE),
     f"{A}/On/Options/Parameter/Name", 7, "'AMPS_X' is not a parameter name"),
    ("default against pattern", TXLOG + "\n" + action(on("amps-action-on-admin", "<Parameter><Name>n</Name><Default>12</Default><Pattern>[a-z]+</Pattern></Parameter>"), ARCHIVE),
     f"{A}/On/Options/Parameter/Default", 7, "the default '12' does not match the Pattern '[a-z]+'"),
    ("duplicate action", TXLOG + "\n<Actions>\n<Action><Name>x</Name>" + ADMIN + ARCHIVE + "</Action>\n<Action><Name>x</Name>"
     + ADMIN + ARCHIVE + "</Action></Actions>", f"{A}[2]", 6, "duplicate action name 'x' (first at line 5)"),
    ("bad action name", TXLOG + "\n" + action(ADMIN, ARCHIVE, name="no/slash"), f"{A}/Name", 6,
     "'no/slash' is not a valid action name"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("body", "path", "line", "fragment"),
    [case[1:] for case in REFUSED],
    ids=[case[0] for case in REFUSED],
)
def test_refused(body: str, path: str, line: int, fragment: str) -> None:
    assert_refused(body, path, line, fragment)


def test_the_replication_modules_read_their_age_and_destinations() -> None:
    config = parse(doc(TXLOG + REPLICATION + "\n" + action(
        on("amps-action-on-schedule", "<Every>15s</Every>"),
        do("amps-action-do-downgrade-replication", "<Age>300s</Age>"),
        do("amps-action-do-upgrade-replication", "<Age>10s</Age><Destination>b</Destination>"),
        do("amps-action-do-publish-message", "<Topic>ops</Topic><Data>"
           '{"down":"{{AMPS_DESTINATIONS_DOWNGRADED}}","up":"{{AMPS_DESTINATIONS_UPGRADED}}"}</Data>'),
    )))  # fmt: skip
    down, up, _ = config.actions[0].steps
    assert down == DowngradeReplication(300.0, (), where=f"{A}/Do[1]")
    assert up == UpgradeReplication(10.0, ("b",), where=f"{A}/Do[2]")


# -- schedules and templates as values --------------------------------------------------------

DAYS = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]


@given(
    hour=st.integers(0, 23), minute=st.integers(0, 59), second=st.none() | st.integers(0, 59),
    day=st.none() | st.integers(0, 6), style=st.integers(0, 3), z=st.booleans(),
)  # fmt: skip
def test_any_spelling_of_a_calendar_time_reads_back_the_same_schedule(
    hour: int, minute: int, second: int | None, day: int | None, style: int, z: bool
) -> None:
    clock = f"{hour:02d}:{minute:02d}" + (f":{second:02d}" if second is not None else "")
    clock += "Z" if z else ""
    if day is None:
        text = [clock, f"Daily {clock}", f"daily at {clock}", f"DAILY {clock}"][style]
    else:
        name = [DAYS[day], DAYS[day].upper(), ["Monday", "Tuesday", "Wednesday", "Thursday",
                "Friday", "Saturday", "Sunday"][day], DAYS[day].lower()][style]  # fmt: skip
        text = [f"{name} {clock}", f"Weekly {name} {clock}", f"{name} at {clock}",
                f"weekly {name} at {clock}"][style]  # fmt: skip
    schedule = parse_every(text)
    assert schedule.kind == ("daily" if day is None else "weekly")
    assert schedule.time_of_day == hour * 3600 + minute * 60 + (second or 0)
    assert schedule.weekday == day and schedule.zone == "UTC"


@pytest.mark.parametrize(
    ("text", "zone", "message"),
    [
        ("15s", "Europe/Paris", "TimeZone applies to calendar times, not to a timer"),
        ("0s", None, "out of range"),
        ("Daily Sun 03:00", None, "a daily schedule names no day"),
        ("Sun", None, "is not a schedule"),
        ("03:60", None, "is not a time of day"),
        ("at 03:00 now", None, "is not a schedule"),
    ],
)
def test_schedules_refused(text: str, zone: str | None, message: str) -> None:
    with pytest.raises(ScheduleError, match=message):
        parse_every(text, zone)


literals = st.text(alphabet=st.characters(blacklist_characters="{}"), max_size=8)
names = st.sampled_from(["A", "AMPS_USER", "x_1", "who"])


@given(head=literals, pairs=st.lists(st.tuples(names, literals), max_size=5))
def test_a_template_expands_its_references_and_keeps_its_text(
    head: str, pairs: list[tuple[str, str]]
) -> None:
    text = head + "".join("{{" + name + "}}" + tail for name, tail in pairs)
    template = Template.parse(text)
    assert template.variables == tuple(name for name, _ in pairs)
    assert template.constant == (not pairs)
    values = {name: f"<{name}>" for name, _ in pairs}
    assert template.expand(values) == head + "".join(f"<{n}>{t}" for n, t in pairs)
    # an unknown name expands to nothing (AMPS); spaces inside the braces are allowed
    assert template.expand({}) == head + "".join(t for _, t in pairs)
    spaced = head + "".join("{{ " + name + " }}" + tail for name, tail in pairs)
    assert Template.parse(spaced).expand(values) == template.expand(values)


def test_byte_variables_and_escaping() -> None:
    template = Template.parse('{"a":"{{x}}{{AMPS_BYTE_41}}"}')
    assert template.expand({"x": 'q"'}, lambda v: v.replace('"', '\\"')) == '{"a":"q\\"A"}'
    for bad in ("{{", "a {{ b", "{{1}}", "{{x y}}"):
        with pytest.raises(TemplateError):
            Template.parse(bad)
