"""The modules of message-driven actions: each reader's model and refusals, ``<Webhooks>``
and where a webhook may post, what an event action may run (a step's ``event_use``
against its triggers' rate), the loops refused at load, and the new modules not run yet
(SOW compaction) refused as "not supported yet" once the file is checked."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from spool.server.config import (
    BASE_VARIABLES,
    EVENTS_CLIENTS,
    CompactSow,
    ConfigError,
    DeleteSow,
    EchoMessage,
    ExtractValues,
    PublishMessage,
    SowTopicConfig,
    Step,
    Template,
    Webhook,
    WebhooksConfig,
    redact_url,
)
from spool.server.config.sections.actionmodules import DO_READERS, ActionFacts, ActionScope
from spool.server.config.sections.webhooks import read_webhook
from spool.server.config.values import Context
from spool.server.config.xmltree import parse_tree
from tests.unit.config.helpers import assert_refused, doc, parse
from tests.unit.config.test_actions import TXLOG, A, do, on

ALLOW = ("https://hooks.example.com/spool/", "http://localhost:8080/hooks")
FACTS = ActionFacts(
    transports=("websocket-json",),
    has_txlog=True,
    directories=("data", "stats", "journal", "archive"),
    sow_topics=(
        SowTopicConfig("orders", keys=("/id",)),
        SowTopicConfig("^fx/", is_regex=True),
        SowTopicConfig("quotes", durability="transient"),
    ),
    event_topics=frozenset({EVENTS_CLIENTS}),
    webhook_allow=ALLOW,
)
TOKEN = "Bearer hook-SECRET-token"
KEY = "signing-SECRET-key-0123456789"
CTX = Context({"HOOK": TOKEN, "KEY": KEY}, Path("/srv/spool"))
WEBHOOK = "spool-action-do-webhook"
DELETE = "amps-action-do-delete-sow"
COMPACT = "spool-action-do-compact-sow"
ECHO = "amps-action-do-echo-message"
EXTRACT = "amps-action-do-extract-values"
PUBLISH = "amps-action-do-publish-message"


def read_do(module: str, options: str = "", facts: ActionFacts = FACTS) -> Step:
    """Read one ``<Do>`` (at ``/Do``, line 1) with the reader of ``module``, in a scope
    holding the base variables, ``AMPS_TOPIC``, ``AMPS_DATA`` and ``SYM``."""
    inner = f"<Options>{options}</Options>" if options else ""
    element = parse_tree(f"<Do><Module>{module}</Module>{inner}</Do>")
    opts = next((child for child in element.children if child.tag == "Options"), None)
    scope = ActionScope({*BASE_VARIABLES, "AMPS_TOPIC", "AMPS_DATA", "SYM"})
    reader = read_webhook if module == WEBHOOK else DO_READERS[module]
    return reader(element, opts, CTX, facts, scope)


def t(text: str) -> Template:
    return Template.parse(text)


# -- what each module reads -----------------------------------------------------------------

READ: list[tuple[str, str, Step]] = [
    (DELETE, "<Topic>orders</Topic><Filter>/id = '{{SYM}}'</Filter>",
     DeleteSow(t("orders"), filter=t("/id = '{{SYM}}'"), where="/Do")),
    (DELETE, "<Topic>{{AMPS_TOPIC}}</Topic><Key>{{SYM}}</Key>",
     DeleteSow(t("{{AMPS_TOPIC}}"), key=t("{{SYM}}"), where="/Do")),
    (DELETE, "<Topic>fx/eur</Topic><Filter>/px &gt; 2</Filter>",
     DeleteSow(t("fx/eur"), filter=t("/px > 2"), where="/Do")),
    (COMPACT, "", CompactSow(where="/Do")),
    (COMPACT, "<Topic>orders</Topic><Topic>^fx/</Topic><Topic>fx/eur</Topic>",
     CompactSow(("orders", "^fx/", "fx/eur"), where="/Do")),
    (ECHO, "<Message>big order {{SYM}}</Message>", EchoMessage(t("big order {{SYM}}"), where="/Do")),
    (ECHO, "<Message>m</Message><Level>warning</Level><MaxPerSecond>5</MaxPerSecond>",
     EchoMessage(t("m"), "warning", 5, where="/Do")),
    (ECHO, "<Message>m</Message><Level>error</Level><MaxPerSecond>10000</MaxPerSecond>",
     EchoMessage(t("m"), "error", 10_000, where="/Do")),
    (EXTRACT, "<Value>SYM2=/sym</Value><Value> NOTIONAL = /qty * /px </Value>",
     ExtractValues((("SYM2", "/sym"), ("NOTIONAL", "/qty * /px")), where="/Do")),
    (EXTRACT, "<Value>n=/a/b</Value><Data>{{AMPS_DATA}}</Data>",
     ExtractValues((("n", "/a/b"),), t("{{AMPS_DATA}}"), where="/Do")),
    (PUBLISH, "<Topic>out</Topic><Data>{}</Data><CorrelationId>{{SYM}}</CorrelationId>",
     PublishMessage(t("out"), t("{}"), correlation_id=t("{{SYM}}"), where="/Do")),
    (WEBHOOK, '<Url>https://hooks.example.com/spool/big</Url><Body>{"s":"{{SYM}}"}</Body>',
     Webhook(t("https://hooks.example.com/spool/big"), t('{"s":"{{SYM}}"}'), where="/Do")),
    (WEBHOOK, "<Url>http://localhost:8080/hooks/{{SYM}}?q={{SYM}}</Url><Body>hello</Body>"
     "<ContentType>text/plain; charset=utf-8</ContentType>",
     Webhook(t("http://localhost:8080/hooks/{{SYM}}?q={{SYM}}"), t("hello"),
             "text/plain; charset=utf-8", where="/Do")),
    (WEBHOOK, "<Url>HTTPS://Hooks.Example.COM:443/spool/a/../b</Url><Body>{}</Body>",
     Webhook(t("HTTPS://Hooks.Example.COM:443/spool/a/../b"), t("{}"), where="/Do")),
    (WEBHOOK, "<Url>https://hooks.example.com/spool/?{{SYM}}</Url><Body>{}</Body>",
     Webhook(t("https://hooks.example.com/spool/?{{SYM}}"), t("{}"), where="/Do")),
    (WEBHOOK, "<Url>https://hooks.example.com/spool/a%2Fb</Url><Body>{}</Body>",
     Webhook(t("https://hooks.example.com/spool/a%2Fb"), t("{}"), where="/Do")),
]  # fmt: skip


@pytest.mark.parametrize(
    ("module", "options", "expected"), READ, ids=[f"{m}:{i}" for i, (m, _, _) in enumerate(READ)]
)
def test_each_module_reads_into_its_model(module: str, options: str, expected: Step) -> None:
    assert read_do(module, options) == expected


def test_a_webhook_reads_every_option_and_never_shows_its_secrets() -> None:
    step = read_do(
        WEBHOOK,
        "<Url>https://hooks.example.com/spool/x</Url><Body>{}</Body>"
        "<Header>Authorization: ${HOOK}</Header><Header>X-Sym: {{SYM}}</Header>"
        "<SigningKey>${KEY}</SigningKey><Timeout>2s</Timeout><Retries>0</Retries>"
        "<Backoff>500ms</Backoff><Concurrency>4</Concurrency>",
    )
    assert isinstance(step, Webhook)
    assert step.headers == (("Authorization", t(TOKEN)), ("X-Sym", t("{{SYM}}")))
    assert step.signing_key == KEY
    assert (step.timeout, step.retries, step.backoff, step.concurrency) == (2.0, 0, 0.5, 4)
    assert TOKEN not in repr(step) and KEY not in repr(step)
    defaults = read_do(WEBHOOK, "<Url>https://hooks.example.com/spool/</Url><Body>{}</Body>")
    assert isinstance(defaults, Webhook)
    assert (defaults.content_type, defaults.timeout, defaults.retries) == (
        "application/json",
        5.0,
        3,
    )
    assert (defaults.backoff, defaults.concurrency, defaults.signing_key) == (1.0, 1, None)


def test_extract_values_provides_the_names_it_sets() -> None:
    step = read_do(EXTRACT, "<Value>A=/a</Value><Value>B=/b + 1</Value>")
    assert step.provides == ("A", "B")


def test_a_url_is_shown_without_its_query() -> None:
    assert redact_url("https://h/p?token=x") == "https://h/p?…"
    assert redact_url("https://h/p") == "https://h/p"


# -- refused by the readers -----------------------------------------------------------------

ONLY_TRANSIENT = replace(FACTS, sow_topics=(SowTopicConfig("quotes", durability="transient"),))
URL = "<Body>{}</Body><Url>"

# (id, module, options, facts, path, fragment)
REFUSED: list[tuple[str, str, str, ActionFacts, str, str]] = [
    ("delete without topic", DELETE, "<Key>k</Key>", FACTS, "/Do/Options",
     f"{DELETE} needs the option <Topic>"),
    ("delete with neither", DELETE, "<Topic>orders</Topic>", FACTS, "/Do/Options",
     f"{DELETE} needs exactly one of <Filter> (the records that match) or <Key> (one record's "
     "key); got none"),
    ("delete with both", DELETE, "<Topic>orders</Topic><Filter>/a</Filter><Key>k</Key>", FACTS,
     "/Do/Options", "got Filter, Key"),
    ("delete from no SOW topic", DELETE, "<Topic>trades</Topic><Key>k</Key>", FACTS,
     "/Do/Options/Topic", "no SOW topic rule matches 'trades' (SOW topics: orders, ^fx/, quotes)"),
    ("delete from a regex", DELETE, "<Topic>^fx/</Topic><Key>k</Key>", FACTS, "/Do/Options/Topic",
     "the Topic is one topic, not a regular expression"),
    ("delete filter", DELETE, "<Topic>orders</Topic><Filter>/id ==</Filter>", FACTS,
     "/Do/Options/Filter", "bad filter:"),
    ("delete key variable", DELETE, "<Topic>orders</Topic><Key>{{NOPE}}</Key>", FACTS,
     "/Do/Options/Key", "unknown variable {{NOPE}}"),
    ("compact without persistent topics", COMPACT, "", ONLY_TRANSIENT, "/Do",
     f"{COMPACT} compacts the files of persistent SOW topics, and this instance has none"),
    ("compact a transient topic", COMPACT, "<Topic>quotes</Topic>", FACTS, "/Do/Options/Topic",
     "'quotes' is a transient SOW topic (memory only): it has no file to compact"),
    ("compact no SOW topic", COMPACT, "<Topic>trades</Topic>", FACTS, "/Do/Options/Topic",
     "no SOW topic rule matches 'trades'"),
    ("compact twice", COMPACT, "<Topic>orders</Topic><Topic>orders</Topic>", FACTS,
     "/Do/Options/Topic[2]", "topic 'orders' is named twice"),
    ("echo without message", ECHO, "<Level>info</Level>", FACTS, "/Do/Options",
     f"{ECHO} needs the option <Message>"),
    ("echo level", ECHO, "<Message>m</Message><Level>debug</Level>", FACTS, "/Do/Options/Level",
     "'debug' is not a valid Level (allowed: info, warning, error)"),
    ("echo rate zero", ECHO, "<Message>m</Message><MaxPerSecond>0</MaxPerSecond>", FACTS,
     "/Do/Options/MaxPerSecond", "MaxPerSecond must be between 1 and 10000, got 0"),
    ("echo rate too high", ECHO, "<Message>m</Message><MaxPerSecond>10001</MaxPerSecond>", FACTS,
     "/Do/Options/MaxPerSecond", "MaxPerSecond must be between 1 and 10000, got 10001"),
    ("extract nothing", EXTRACT, "", FACTS, "/Do", f"{EXTRACT} needs at least one <Value>"),
    ("extract without =", EXTRACT, "<Value>SYM</Value>", FACTS, "/Do/Options/Value",
     "a Value is NAME=expression"),
    ("extract without expression", EXTRACT, "<Value>S=</Value>", FACTS, "/Do/Options/Value",
     "a Value is NAME=expression"),
    ("extract a reserved name", EXTRACT, "<Value>amps_x=/x</Value>", FACTS, "/Do/Options/Value",
     "'amps_x' is not a variable name"),
    ("extract a bad name", EXTRACT, "<Value>1x=/x</Value>", FACTS, "/Do/Options/Value",
     "'1x' is not a variable name"),
    ("extract twice", EXTRACT, "<Value>S=/x</Value><Value>S=/y</Value>", FACTS,
     "/Do/Options/Value[2]", "'S' is set twice (first at line 1)"),
    ("extract expression", EXTRACT, "<Value>S=/x ==</Value>", FACTS, "/Do/Options/Value",
     "the expression of S does not compile"),
    ("extract data variable", EXTRACT, "<Value>S=/x</Value><Data>{{NOPE}}</Data>", FACTS,
     "/Do/Options/Data", "unknown variable {{NOPE}}"),
    ("publish to an event topic", PUBLISH, f"<Topic>{EVENTS_CLIENTS}</Topic><Data>{{}}</Data>",
     FACTS, "/Do/Options/Topic", f"'{EVENTS_CLIENTS}' is an event topic turned on in "
     "<EventTopics>: only the broker publishes it"),
    ("publish correlation variable", PUBLISH, "<Topic>o</Topic><Data>{}</Data>"
     "<CorrelationId>{{NOPE}}</CorrelationId>", FACTS, "/Do/Options/CorrelationId",
     "unknown variable {{NOPE}}"),
    ("webhook without Allow", WEBHOOK, URL + "https://hooks.example.com/spool/</Url>",
     replace(FACTS, webhook_allow=()), "/Do", f"{WEBHOOK} posts only under the URL prefixes of "
     "<Actions><Webhooks><Allow>, and none is given"),
    ("webhook without Url", WEBHOOK, "<Body>{}</Body>", FACTS, "/Do/Options",
     f"{WEBHOOK} needs the option <Url>"),
    ("webhook without Body", WEBHOOK, "<Url>https://hooks.example.com/spool/</Url>", FACTS,
     "/Do/Options", f"{WEBHOOK} needs the option <Body>"),
    ("templated host", WEBHOOK, URL + "https://{{SYM}}.example.com/spool/</Url>", FACTS,
     "/Do/Options/Url", "the scheme, host and port of the Url are written out"),
    ("templated scheme", WEBHOOK, URL + "{{SYM}}://hooks.example.com/spool/</Url>", FACTS,
     "/Do/Options/Url", "the scheme, host and port of the Url are written out"),
    ("templated port", WEBHOOK, URL + "https://hooks.example.com:{{SYM}}/spool/</Url>", FACTS,
     "/Do/Options/Url", "the scheme, host and port of the Url are written out"),
    ("another host", WEBHOOK, URL + "https://evil.example.com/spool/</Url>", FACTS,
     "/Do/Options/Url", "'https://evil.example.com/spool/' is under no <Webhooks><Allow> "
     "prefix (allowed: https://hooks.example.com/spool/, http://localhost:8080/hooks)"),
    ("another port", WEBHOOK, URL + "https://hooks.example.com:8443/spool/</Url>", FACTS,
     "/Do/Options/Url", "is under no <Webhooks><Allow> prefix"),
    ("dot segments", WEBHOOK, URL + "https://hooks.example.com/spool/../admin</Url>", FACTS,
     "/Do/Options/Url", "is under no <Webhooks><Allow> prefix"),
    ("encoded dots", WEBHOOK, URL + "https://hooks.example.com/spool/%2E%2e/admin</Url>", FACTS,
     "/Do/Options/Url", "the Url steps out of its <Webhooks><Allow> prefix where a server "
     "decodes %2E"),
    ("encoded slash", WEBHOOK, URL + "https://hooks.example.com/spool/..%2Fadmin</Url>", FACTS,
     "/Do/Options/Url", "reads %2F, %5C or \\ as a /"),
    ("a longer name", WEBHOOK, URL + "http://localhost:8080/hooksmith</Url>", FACTS,
     "/Do/Options/Url", "is under no <Webhooks><Allow> prefix"),
    ("a path cut by a template", WEBHOOK, URL + "https://hooks.example.com/sp{{SYM}}</Url>",
     FACTS, "/Do/Options/Url", "is under no <Webhooks><Allow> prefix"),
    ("a name cut by a template", WEBHOOK, URL + "http://localhost:8080/hooks{{SYM}}</Url>",
     FACTS, "/Do/Options/Url", "is under no <Webhooks><Allow> prefix"),
    ("plain http under https", WEBHOOK, URL + "http://hooks.example.com/spool/x</Url>", FACTS,
     "/Do/Options/Url", "the Url posts in plain http, and only an https:// entry of "
     "<Webhooks><Allow> covers it"),
    ("credentials", WEBHOOK, URL + "https://u:pw@hooks.example.com/spool/</Url>", FACTS,
     "/Do/Options/Url", "holds credentials (user@host): send them in a <Header>"),
    ("not http", WEBHOOK, URL + "ftp://hooks.example.com/spool/</Url>", FACTS,
     "/Do/Options/Url", "is a ftp:// URL: webhooks post over http or https"),
    ("not absolute", WEBHOOK, URL + "/spool/x</Url>", FACTS, "/Do/Options/Url",
     "is not an absolute http:// or https:// URL"),
    ("port out of range", WEBHOOK, URL + "https://hooks.example.com:99999/spool/</Url>", FACTS,
     "/Do/Options/Url", "a port that is not a number from 1 to 65535"),
    ("content type", WEBHOOK, "<Url>https://hooks.example.com/spool/</Url><Body>{}</Body>"
     "<ContentType>json</ContentType>", FACTS, "/Do/Options/ContentType",
     "'json' is not a media type"),
    ("body not JSON", WEBHOOK, "<Url>https://hooks.example.com/spool/</Url><Body>{oops</Body>",
     FACTS, "/Do/Options/Body", "the Body is not JSON (application/json)"),
    ("header twice", WEBHOOK, "<Url>https://hooks.example.com/spool/</Url><Body>{}</Body>"
     "<Header>X-A: 1</Header><Header>x-a: 2</Header>", FACTS, "/Do/Options/Header[2]",
     "the header x-a is given twice"),
    ("header set by Spool", WEBHOOK, "<Url>https://hooks.example.com/spool/</Url><Body>{}</Body>"
     "<Header>Content-Type: text/plain</Header>", FACTS, "/Do/Options/Header",
     "the header Content-Type is set by Spool"),
    ("header variable", WEBHOOK, "<Url>https://hooks.example.com/spool/</Url><Body>{}</Body>"
     "<Header>X-A: {{NOPE}}</Header>", FACTS, "/Do/Options/Header", "unknown variable {{NOPE}}"),
    ("timeout", WEBHOOK, "<Url>https://hooks.example.com/spool/</Url><Body>{}</Body>"
     "<Timeout>50ms</Timeout>", FACTS, "/Do/Options/Timeout", "Timeout must be between"),
    ("timeout too long", WEBHOOK, "<Url>https://hooks.example.com/spool/</Url><Body>{}</Body>"
     "<Timeout>61s</Timeout>", FACTS, "/Do/Options/Timeout", "Timeout must be between"),
    ("retries", WEBHOOK, "<Url>https://hooks.example.com/spool/</Url><Body>{}</Body>"
     "<Retries>11</Retries>", FACTS, "/Do/Options/Retries", "Retries must be between 0 and 10, got 11"),
    ("backoff", WEBHOOK, "<Url>https://hooks.example.com/spool/</Url><Body>{}</Body>"
     "<Backoff>0</Backoff>", FACTS, "/Do/Options/Backoff", "Backoff must be between"),
    ("concurrency", WEBHOOK, "<Url>https://hooks.example.com/spool/</Url><Body>{}</Body>"
     "<Concurrency>17</Concurrency>", FACTS, "/Do/Options/Concurrency",
     "Concurrency must be between 1 and 16, got 17"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("module", "options", "facts", "path", "fragment"),
    [case[1:] for case in REFUSED],
    ids=[case[0] for case in REFUSED],
)
def test_refused_by_the_reader(
    module: str, options: str, facts: ActionFacts, path: str, fragment: str
) -> None:
    with pytest.raises(ConfigError) as info:
        read_do(module, options, facts)
    assert (info.value.path, info.value.line) == (path, 1), info.value.message
    assert fragment in info.value.message


SECRET_CASES = [
    ("a query", URL + "https://evil.example.com/x?token=SECRET-1</Url>", "?…"),
    ("a malformed header", "<Url>https://hooks.example.com/spool/</Url><Body>{}</Body>"
     "<Header>Authorization SECRET-1</Header>", "a Header is 'Name: value'"),
    ("an empty header value", "<Url>https://hooks.example.com/spool/</Url><Body>{}</Body>"
     "<Header>Authorization:</Header>", "a Header is 'Name: value'"),
    ("a malformed reference in a header", "<Url>https://hooks.example.com/spool/</Url>"
     "<Body>{}</Body><Header>X-A: SECRET-1 {{ 1x }}</Header>", "has a malformed {{VARIABLE}}"),
    ("a short signing key", "<Url>https://hooks.example.com/spool/</Url><Body>{}</Body>"
     "<SigningKey>SECRET-1</SigningKey>", "a SigningKey has at least 16 characters"),
]  # fmt: skip


@pytest.mark.parametrize(("options", "fragment"), [c[1:] for c in SECRET_CASES],
                         ids=[c[0] for c in SECRET_CASES])  # fmt: skip
def test_a_webhook_error_never_quotes_a_secret(options: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        read_do(WEBHOOK, options)
    assert fragment in info.value.message
    assert "SECRET" not in str(info.value)


# -- in a whole file ------------------------------------------------------------------------

#: a SOW topic and the webhooks' allow list, on the document's line 3
WORLD = (
    TXLOG + "<SOW><Topic><Name>orders</Name><Key>/id</Key></Topic></SOW>"
    f"<EventTopics><Topic><Name>{EVENTS_CLIENTS}</Name></Topic></EventTopics>"
)
HOOKS = "<Webhooks><Allow>https://hooks.example.com/spool/</Allow></Webhooks>"
ON_PUBLISH = on("amps-action-on-publish-message", "<Topic>orders</Topic>")
ON_CLIENT = on("amps-action-on-connect-client")
ON_ADMIN = on("amps-action-on-admin")
PLAIN = do(PUBLISH, "<Topic>out</Topic><Data>{}</Data>")
HOOK_STEP = do(WEBHOOK, "<Url>https://hooks.example.com/spool/x</Url><Body>{}</Body>")


def actions(*lines: str, hooks: str = HOOKS) -> str:
    """WORLD on line 3, <Actions> and its Webhooks on line 4, the n-th action on line 4 + n."""
    return WORLD + "\n<Actions>" + hooks + "\n" + "\n".join(lines) + "\n</Actions>"


def one(*parts: str, name: str = "a") -> str:
    return f"<Action><Name>{name}</Name>{''.join(parts)}</Action>"


def publishes(topic: str) -> str:
    return do(PUBLISH, f"<Topic>{topic}</Topic><Data>{{}}</Data>")


def watches(topic: str, extra: str = "") -> str:
    return on("amps-action-on-publish-message", f"<Topic>{topic}</Topic>{extra}")


W = "/SpoolConfig/Actions/Webhooks"

# (id, body, path, line, fragment)
IN_FILE: list[tuple[str, str, str, int, str]] = [
    ("allow not http", actions(one(ON_ADMIN, PLAIN), hooks="<Webhooks><Allow>ftp://h/</Allow>"
     "</Webhooks>"), f"{W}/Allow", 4, "the Allow entry is a ftp:// URL"),
    ("allow with a query", actions(one(ON_ADMIN, PLAIN), hooks="<Webhooks><Allow>https://h/?a=1"
     "</Allow></Webhooks>"), f"{W}/Allow", 4, "the Allow entry has a query or a fragment"),
    ("allow twice", actions(one(ON_ADMIN, PLAIN), hooks="<Webhooks><Allow>https://H/a/</Allow>"
     "<Allow>https://h:443/a/./</Allow></Webhooks>"), f"{W}/Allow[2]", 4,
     "'https://h/a/' is allowed twice"),
    ("threads", actions(one(ON_ADMIN, PLAIN), hooks="<Webhooks><Threads>0</Threads></Webhooks>"),
     f"{W}/Threads", 4, "Threads must be between 1 and 64, got 0"),
    ("queue depth", actions(one(ON_ADMIN, PLAIN), hooks="<Webhooks><QueueDepth>0</QueueDepth>"
     "</Webhooks>"), f"{W}/QueueDepth", 4, "QueueDepth must be between 1 and 1000000, got 0"),
    ("unknown in Webhooks", actions(one(ON_ADMIN, PLAIN), hooks="<Webhooks><Deny>x</Deny>"
     "</Webhooks>"), f"{W}/Deny", 4, "unknown element <Deny> in <Webhooks>"),
    # what an event action may run
    ("journals per message", actions(one(ON_PUBLISH, do("amps-action-do-archive-journal",
     "<Age>1d</Age>"))), f"{A}/Do", 5, "amps-action-do-archive-journal is a maintenance step: "
     "run it on a schedule or on demand, not per message"),
    ("statistics per client", actions(one(ON_CLIENT, do("amps-action-do-truncate-statistics",
     "<Age>1d</Age>"))), f"{A}/Do", 5, "is a maintenance step: run it on a schedule or on "
     "demand, not per event"),
    ("compaction per message", actions(one(ON_PUBLISH, PLAIN, do(COMPACT))), f"{A}/Do[2]", 5,
     f"{COMPACT} is a maintenance step"),
    ("an event per message", actions(one(ON_PUBLISH, do("amps-action-do-execute-event",
     "<Event>e</Event>"))), f"{A}/Do", 5, "amps-action-do-execute-event is a maintenance step"),
    ("a transport per message", actions(one(ON_PUBLISH, do("amps-action-do-disable-transport",
     "<Transport>websocket-json</Transport>"))), f"{A}/Do", 5,
     "amps-action-do-disable-transport changes the instance: an action may run it per client "
     "or link happening, not per message"),
    ("a disk condition per message", actions(one(ON_PUBLISH, do("amps-action-if-disk-usage",
     "<Path>data</Path><Above>90%</Above>", "If"), PLAIN)), f"{A}/If", 5,
     "amps-action-if-disk-usage changes the instance"),
    ("a webhook status per event", actions(one(ON_PUBLISH, HOOK_STEP, do(PUBLISH,
     '<Topic>o</Topic><Data>{"s":"{{AMPS_WEBHOOK_STATUS}}"}</Data>'))), f"{A}/Do[2]/Options/Data",
     5, "unknown variable {{AMPS_WEBHOOK_STATUS}}"),
    ("publish to an enabled event topic", actions(one(ON_ADMIN, publishes(EVENTS_CLIENTS))),
     f"{A}/Do/Options/Topic", 5, "is an event topic turned on in <EventTopics>"),
    # loops
    ("a self loop", actions(one(watches("t"), publishes("t"))), f"{A}/Do", 5,
     "'a' publishes to 't', which triggers 'a': a loop"),
    ("a loop of two", actions(one(watches("x"), publishes("y")),
     one(watches("^y"), publishes("x"), name="b")), f"{A}[2]/Do", 6,
     "'a' publishes to 'y', which triggers 'b', which publishes to 'x', which triggers 'a': a "
     "loop (each message would derive the next for ever); add a Filter to a trigger, or publish "
     "to another topic"),
    ("a loop of three after a dead end", actions(
     one(watches("x"), publishes("y"), publishes("dead")), one(watches("y"), publishes("z"),
     name="b"), one(watches("z"), PLAIN, publishes("x"), name="c")), f"{A}[3]/Do[2]", 7,
     "'a' publishes to 'y', which triggers 'b', which publishes to 'z', which triggers 'c', "
     "which publishes to 'x', which triggers 'a': a loop"),
    ("extract without data on demand", actions(one(ON_ADMIN, do(EXTRACT, "<Value>N=/n</Value>"),
     PLAIN)), f"{A}/Do[1]", 5, f"{EXTRACT} without <Data> reads the message that fired the run, "
     "and this action runs on no message: give it <Data> (a JSON template)"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("body", "path", "line", "fragment"),
    [case[1:] for case in IN_FILE],
    ids=[case[0] for case in IN_FILE],
)
def test_in_a_file(body: str, path: str, line: int, fragment: str) -> None:
    assert_refused(body, path, line, fragment)


def test_a_run_of_its_own_reads_the_webhook_status() -> None:
    body = actions(one(ON_ADMIN, HOOK_STEP, do(PUBLISH,
                   '<Topic>o</Topic><Data>{"s":"{{AMPS_WEBHOOK_STATUS}}"}</Data>')))  # fmt: skip
    (action,) = parse(doc(body)).actions
    assert [step.module for step in action.steps] == [WEBHOOK, PUBLISH]


# (id, body): what the file cannot prove a loop loads (the runtime cuts those)
NOT_LOOPS: list[tuple[str, str]] = [
    ("filtered", actions(one(watches("t", "<Filter>/n &lt; 3</Filter>"), publishes("t")))),
    ("conditional", actions(one(watches("t"), do("amps-action-if-condition",
     "<Condition>/txlog/bytes &gt; 1</Condition>", "If"), publishes("t")))),
    ("templated", actions(one(watches("t"), do(PUBLISH,
     "<Topic>{{AMPS_TOPIC}}</Topic><Data>{}</Data>")))),
    ("replicated only", TXLOG + "<Replication><Destination><Name>b</Name><SyncType>"
     "async</SyncType><Topic><Name>.*</Name></Topic><Transport><Type>amps-replication</Type>"
     "<InetAddr>127.0.0.1:9107</InetAddr></Transport></Destination></Replication>\n<Actions>\n"
     + one(watches("t", "<MessageSource>replicated</MessageSource>"), publishes("t"))
     + "\n</Actions>"),
    ("a schedule feeds none", actions(one(on("amps-action-on-schedule", "<Every>1m</Every>"),
     publishes("t")), one(watches("u"), publishes("v"), name="b"))),
]  # fmt: skip


@pytest.mark.parametrize("body", [c[1] for c in NOT_LOOPS], ids=[c[0] for c in NOT_LOOPS])
def test_what_the_file_cannot_prove_a_loop_loads(body: str) -> None:
    assert parse(doc(body)).actions


def test_compaction_loads_in_an_action_run_on_demand() -> None:
    body = actions(one(ON_ADMIN, do(COMPACT, "<Topic>orders</Topic>"),
                       do(ECHO, "<Message>{{AMPS_SOW_COMPACTED}} compacted</Message>")))  # fmt: skip
    (action,) = parse(doc(body)).actions
    assert [s.module for s in action.steps] == [COMPACT, ECHO]


def test_an_action_per_client_may_change_the_instance() -> None:
    body = actions(one(ON_CLIENT, do("amps-action-do-disable-transport",
                                      "<Transport>websocket-json</Transport>")))  # fmt: skip
    (action,) = parse(doc(body)).actions
    assert action.event_driven
    assert [s.module for s in action.steps] == ["amps-action-do-disable-transport"]


def test_delete_echo_extract_and_a_correlation_id_load_in_an_action_run_on_demand() -> None:
    body = actions(one(ON_ADMIN, do(DELETE, "<Topic>orders</Topic><Key>k-1</Key>"),
                       do(ECHO, "<Message>{{AMPS_SOW_DELETED}} gone</Message>"),
                       do(EXTRACT, '<Value>N=/n + 1</Value><Data>{"n":1}</Data>'),
                       do(PUBLISH, "<Topic>o</Topic><Data>{\"n\":{{N}}}</Data>"
                          "<CorrelationId>c-{{N}}</CorrelationId>")))  # fmt: skip
    (action,) = parse(doc(body)).actions
    assert [s.module for s in action.steps] == [DELETE, ECHO, EXTRACT, PUBLISH]
    publish = action.steps[3]
    assert isinstance(publish, PublishMessage) and publish.correlation_id == t("c-{{N}}")


def test_webhooks_are_read_normalised_and_default() -> None:
    body = actions(one(ON_ADMIN, PLAIN), hooks="<Webhooks><Allow>HTTPS://Hooks.Example.com:443"
                   "/spool/./</Allow><Allow>http://[::1]:8080/in</Allow><Threads>8</Threads>"
                   "<QueueDepth>500</QueueDepth></Webhooks>")  # fmt: skip
    assert parse(doc(body)).webhooks == WebhooksConfig(
        ("https://hooks.example.com/spool/", "http://[::1]:8080/in"), 8, 500
    )
    assert parse(doc(actions(one(ON_ADMIN, PLAIN), hooks=""))).webhooks == WebhooksConfig()
    assert WebhooksConfig() == WebhooksConfig((), 4, 10_000)
    assert parse(doc(TXLOG)).webhooks == WebhooksConfig()


def test_a_loop_through_a_file_of_ordinary_actions_is_not_checked() -> None:
    # a schedule action publishing to its own topic is no loop: nothing triggers it
    config = parse(doc(actions(one(ON_ADMIN, publishes("t")))))
    assert [a.name for a in config.actions] == ["a"]
